#!/usr/bin/env python3
"""Captures the Step Functions engine's translation fixtures from a running moto server.

Speaks the raw AWS JSON protocol (standard library only) so the files hold exactly the
payloads the SDK receives. Usage (after `eval "$(scripts/moto/up.sh)"`):

    python3 scripts/moto/capture-sfn-fixtures.py adapters/stepfunctions/tests/fixtures

Timestamps and generated names differ between captures; the translation tests do not
depend on them.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

URL = os.environ.get("TASKGATE_MOTO_URL", "http://127.0.0.1:5005")
ROLE = "arn:aws:iam::123456789012:role/taskgate-fixtures"
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
STAMP = str(int(time.time() * 1000))


def call(service, action, body):
    scope, target = {"sfn": ("states", "AWSStepFunctions"), "sqs": ("sqs", "AmazonSQS")}[service]
    request = urllib.request.Request(
        URL + "/",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"{target}.{action}",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/"
            f"{scope}/aws4_request, SignedHeaders=host, Signature=0",
        },
    )
    try:
        with urllib.request.urlopen(request) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return {"__status": e.code, **json.loads(e.read() or b"{}")}


def save(name, payload):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")
    print("wrote", name)


def machine(name, definition, kind="STANDARD"):
    r = call("sfn", "CreateStateMachine", {
        "name": f"{name}-{STAMP}", "definition": json.dumps(definition), "roleArn": ROLE, "type": kind})
    return r["stateMachineArn"]


def start(arn, name, payload):
    return call("sfn", "StartExecution", {"stateMachineArn": arn, "name": name, "input": json.dumps(payload)})["executionArn"]


def describe(arn):
    return call("sfn", "DescribeExecution", {"executionArn": arn})


def history(arn):
    return call("sfn", "GetExecutionHistory", {"executionArn": arn, "reverseOrder": True, "maxResults": 20})


def wait_until(arn, predicate, what):
    deadline = time.time() + 20
    while time.time() < deadline:
        d = describe(arn)
        h = history(arn)
        if predicate(d, h):
            return d, h
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def terminal(d, _h):
    return d["status"] != "RUNNING"


def main():
    # Pass + Wait + Succeed: running inside the Wait state, then succeeded.
    pws = machine("pass-wait", {"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Result": {"prepared": True}, "ResultPath": "$.prep", "Next": "Pause"},
        "Pause": {"Type": "Wait", "Seconds": 2, "Next": "Done"},
        "Done": {"Type": "Succeed"}}})
    ex = start(pws, "run-1", {"dataset": "d1"})
    d, h = wait_until(ex, lambda d, h: any(e["type"] == "WaitStateEntered" for e in h["events"]), "Wait entered")
    save("describe_running.json", d)
    save("history_in_wait.json", h)
    d, h = wait_until(ex, terminal, "success")
    save("describe_succeeded.json", d)
    save("history_succeeded.json", h)

    # A scalar output.
    scalar = machine("scalar", {"StartAt": "P", "States": {"P": {"Type": "Pass", "Result": "just text", "End": True}}})
    d, _ = wait_until(start(scalar, "run-1", {}), terminal, "scalar")
    save("describe_succeeded_scalar.json", d)

    # Fail state with error and cause.
    fail = machine("fail", {"StartAt": "Check", "States": {
        "Check": {"Type": "Fail", "Error": "Dataset.Missing", "Cause": "no dataset named d1"}}})
    d, h = wait_until(start(fail, "run-1", {}), terminal, "failure")
    save("describe_failed.json", d)
    save("history_failed.json", h)

    # Stopped while waiting.
    long_wait = machine("long-wait", {"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 60, "End": True}}})
    ex = start(long_wait, "run-1", {})
    wait_until(ex, lambda d, h: any(e["type"] == "WaitStateEntered" for e in h["events"]), "Wait entered")
    call("sfn", "StopExecution", {"executionArn": ex, "error": "taskgate.Cancelled", "cause": "cancelled by the client"})
    d, h = wait_until(ex, terminal, "abort")
    save("describe_aborted.json", d)
    save("history_aborted.json", h)

    # Execution-level timeout.
    timeout = machine("timeout", {"TimeoutSeconds": 1, "StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 30, "End": True}}})
    ex = start(timeout, "run-1", {})
    try:
        d, _ = wait_until(ex, terminal, "timeout")
        save("describe_timed_out_moto.json", d)
    except SystemExit:
        print("moto does not time executions out; skipping describe_timed_out_moto.json")
        call("sfn", "StopExecution", {"executionArn": ex})

    # Human step: SQS sendMessage.waitForTaskToken.
    queue = call("sqs", "CreateQueue", {"QueueName": f"taskgate-fixtures-{STAMP}"})["QueueUrl"]
    human_def = {"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Next": "Approve"},
        "Approve": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": queue, "MessageBody": {"taskToken.$": "$$.Task.Token", "input.$": "$"}},
                    "ResultPath": "$.approval", "Next": "Done"},
        "Done": {"Type": "Succeed"}}}
    human = machine("human", human_def)
    save("describe_state_machine_standard.json", call("sfn", "DescribeStateMachine", {"stateMachineArn": human}))
    ex = start(human, "run-1", {"dataset": "d1"})
    waiting = lambda d, h: any(e["type"] == "TaskSubmitted" for e in h["events"])
    d, h = wait_until(ex, waiting, "task token")
    save("describe_human_waiting.json", d)
    save("history_human_waiting.json", h)
    params = next(json.loads(e["taskScheduledEventDetails"]["parameters"]) for e in h["events"] if e["type"] == "TaskScheduled")
    token = params["MessageBody"]["taskToken"]
    call("sfn", "SendTaskSuccess", {"taskToken": token, "output": json.dumps({"approved": True, "note": "ok"})})
    d, h = wait_until(ex, terminal, "approved")
    save("describe_human_accepted.json", d)
    save("history_human_accepted.json", h)
    save("error_invalid_token.json", call("sfn", "SendTaskSuccess", {"taskToken": token, "output": "{}"}))

    ex = start(human, "run-2", {"dataset": "d1"})
    d, h = wait_until(ex, waiting, "task token")
    params = next(json.loads(e["taskScheduledEventDetails"]["parameters"]) for e in h["events"] if e["type"] == "TaskScheduled")
    call("sfn", "SendTaskFailure", {"taskToken": params["MessageBody"]["taskToken"],
                                    "error": "taskgate.Declined", "cause": "the person declined"})
    d, h = wait_until(ex, terminal, "declined")
    save("describe_human_declined.json", d)
    save("history_human_declined.json", h)

    express = machine("express", {"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}, "EXPRESS")
    save("describe_state_machine_express.json", call("sfn", "DescribeStateMachine", {"stateMachineArn": express}))
    save("error_execution_does_not_exist.json", describe(pws.replace(":stateMachine:", ":execution:") + ":nope"))
    save("error_execution_already_exists.json", call("sfn", "StartExecution", {"stateMachineArn": fail, "name": "run-1", "input": "{}"}))
    save("error_state_machine_does_not_exist.json", call("sfn", "DescribeStateMachine", {"stateMachineArn": pws + "-nope"}))


if __name__ == "__main__":
    main()
