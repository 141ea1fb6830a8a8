"""List results handed to python code: loop results and an http list body cross to the child as
marked mappings and read there as lists that also answer their names."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from noetl_stream.dsl.views import http_view, step_view
from noetl_stream.tools.python import encode_inputs
from noetl_stream.tools.python_runner_code import run_code
from noetl_stream.tools.python_runner_values import ListView, decode_inputs, dumps

HTTP = {"status": 200, "headers": {"X-Page": "1"}}


def crossed(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs as the child sees them: encoded, sent as JSON, decoded."""
    decoded: dict[str, Any] = decode_inputs(orjson.loads(orjson.dumps(encode_inputs(inputs))))
    return decoded


def test_loop_results_answer_str_subscripts_and_get_in_the_child() -> None:
    inputs = crossed({"loop": step_view([{"n": 1}, {"n": 2}], None, True)})

    code = ('result = {"total": loop["stats"]["total"], "first": loop["results"][0],\n'
            '          "count": loop["count"], "ok": loop.get("stats")["failed"],\n'
            '          "ns": [r["n"] for r in loop], "last": loop[-1]}\n')
    assert run_code(code, inputs) == {"total": 2, "first": {"n": 1}, "count": 2, "ok": 0,
                                      "ns": [1, 2], "last": {"n": 2}}


def test_an_http_list_body_iterates_as_the_list_and_answers_the_envelope() -> None:
    inputs = crossed({"resp": http_view([{"id": 1}, {"id": 2}], HTTP)})

    resp = inputs["resp"]
    assert isinstance(resp, ListView)
    assert resp == [{"id": 1}, {"id": 2}]
    code = ('result = {"status": resp["status_code"], "n": len(resp["data"]),\n'
            '          "body": resp["body"][1]["id"], "page": resp.get("headers")["X-Page"],\n'
            '          "ids": [r["id"] for r in resp], "none": resp.get("nope")}\n')
    assert run_code(code, inputs) == {"status": 200, "n": 2, "body": 2, "page": "1",
                                      "ids": [1, 2], "none": None}


def test_an_unknown_name_is_a_key_error_and_the_result_stays_a_plain_list() -> None:
    resp = crossed({"resp": http_view([1, 2], HTTP)})["resp"]

    with pytest.raises(KeyError):
        resp["nope"]
    back = run_code("result = {'back': resp, 'nested': [resp]}", {"resp": resp})
    assert orjson.loads(dumps(back)) == {"back": [1, 2], "nested": [[1, 2]]}
    assert resp[0:1] == [1]


def test_list_results_are_mappings_as_noetl_hands_them_to_code() -> None:
    inputs = crossed({"loop": step_view([{"n": 1}], None, True),
                      "resp": http_view([{"id": 7}], HTTP)})

    code = ('result = {"loop": isinstance(loop, dict) and loop.get("stats", {}).get("total"),\n'
            '          "resp": isinstance(resp, dict) and "data" in resp and resp["data"][0]["id"],\n'
            '          "sum": sum(r["n"] for r in loop), "len": len(resp)}\n')
    assert run_code(code, inputs) == {"loop": 1, "resp": 7, "sum": 1, "len": 1}


def test_a_dict_body_crosses_as_its_step_read() -> None:
    inputs = crossed({"resp": http_view({"data": [1], "page": 2}, HTTP)})

    assert inputs["resp"]["data"] == [1]  # the body's own key, as on the step read
    assert inputs["resp"]["status_code"] == 200
    assert inputs["resp"]["body"] == {"data": [1], "page": 2}
