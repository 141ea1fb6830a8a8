"""NoETL's nats object operations name the object `name:`; it reaches the task's fields."""

from __future__ import annotations

from unit_helpers import parse


def test_a_nats_object_operations_name_reaches_the_task_and_warns_nothing() -> None:
    playbook = parse("""
        workflow:
          - step: start
            tool:
              kind: nats
              operation: object_put
              bucket: files
              name: report.json
              data: {a: 1}
    """, strict=True)
    (task,) = playbook.steps[0].tasks
    assert task.config["name"] == "report.json" and task.config["data"] == {"a": 1}
