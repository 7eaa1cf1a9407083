"""A real Temporal worker running taskgate's test workflows (workflows.py).

    python worker.py --address 127.0.0.1:17233 --namespace taskgate-test --task-queue q

Prints "worker ready" on stdout (flushed) once it is polling; exits 0 on SIGTERM or
SIGINT after a graceful shutdown, and stops by itself when the process that started it
is gone. Needs the environment scripts/temporal/python-setup.sh
builds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

import workflows  # noqa: E402


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="frontend host:port")
    parser.add_argument("--namespace", default="taskgate-test")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument(
        "--connect-timeout", type=float, default=30.0, help="seconds to keep trying to connect"
    )
    opts = parser.parse_args()

    deadline = asyncio.get_running_loop().time() + opts.connect_timeout
    while True:
        try:
            client = await Client.connect(opts.address, namespace=opts.namespace)
            break
        except Exception as err:  # the server may still be starting
            if asyncio.get_running_loop().time() > deadline:
                print(f"worker: cannot connect to {opts.address}: {err}", file=sys.stderr)
                return 1
            await asyncio.sleep(0.2)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    worker = Worker(
        client,
        task_queue=opts.task_queue,
        workflows=workflows.WORKFLOWS,
        activities=workflows.ACTIVITIES,
        graceful_shutdown_timeout=timedelta(seconds=2),
    )
    # A worker whose parent (the test that started it) died stops too, rather than
    # polling forever: the parent changes when it is re-parented.
    parent = os.getppid()

    async def orphaned() -> None:
        while os.getppid() == parent:
            await asyncio.sleep(0.5)
        print("worker: parent gone, stopping", file=sys.stderr)
        stop.set()

    watch = asyncio.create_task(orphaned())
    async with worker:
        print("worker ready", flush=True)
        await stop.wait()
    watch.cancel()
    return 0


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalisation: the SDK's native runtime can crash while it is torn
    # down after a clean shutdown, which would turn a clean stop into a signal exit.
    os._exit(code)
