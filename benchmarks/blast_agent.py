"""A raw ACP agent for benchmarks: answers initialize and session/new, then answers each
session/prompt "N" with N pre-serialised agent_message_chunk notifications written in
batches, then the prompt's answer. It costs almost nothing per message, so the client is
what gets measured."""

import json
import sys


def main() -> None:
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            result = {"sessionId": "blast"}
        elif method == "session/prompt":
            n = int(msg["params"]["prompt"][0]["text"].split()[-1])
            line = (json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": "blast", "update": {"sessionUpdate": "agent_message_chunk",
                                                 "content": {"type": "text", "text": "x"}}}}) + "\n").encode()
            for start in range(0, n, 1000):
                out.write(line * min(1000, n - start))
            result = {"stopReason": "end_turn"}
        elif rid is None:
            continue
        else:
            out.write((json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
                       + "\n").encode())
            out.flush()
            continue
        out.write((json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n").encode())
        out.flush()


if __name__ == "__main__":
    main()
