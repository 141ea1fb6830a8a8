"""The web UI: HTML pages and their assets, served by the same app as the JSON API.

The pages hold no data: their scripts read everything through the JSON API with the user's
bearer token, so every action goes through the API's role checks.
"""
