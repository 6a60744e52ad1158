#!/usr/bin/env python3
"""A gateway client in Python's standard library only: proof that an agent in any language can
use pincer's native engines. It runs a whole conversation over `pincer serve`'s Unix socket —
turns answered by the model behind the gateway, a note ingested, the context assembled by
reference and in full, afterTurn, maintain, health — checks every answer, and prints a JSON
summary. Usage: gateway_client.py SOCKET SESSION TURNS
"""

import http.client
import json
import socket
import sys


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix domain socket."""

    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


class Gateway:
    def __init__(self, path):
        self.path = path

    def call(self, method, session=None, params=None):
        body = {"method": method}
        if session is not None:
            body["session"] = session
        if params is not None:
            body["params"] = params
        conn = UnixHTTPConnection(self.path)
        try:
            conn.request("POST", "/v1/call", json.dumps(body),
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = json.loads(response.read())
        finally:
            conn.close()
        if response.status != 200 or not answer.get("ok"):
            raise SystemExit(f"{method} failed: HTTP {response.status} {answer}")
        for field in ("engineId", "generation", "result"):
            if field not in answer:
                raise SystemExit(f"{method}: the answer has no {field}: {answer}")
        return answer


def main():
    path, session, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    gw = Gateway(path)
    served_by = set()
    replies = []
    for n in range(turns):
        answer = gw.call("turn", session, {"prompt": f"question {n + 1}"})
        served_by.add((answer["engineId"], answer["generation"]))
        replies.append(answer["result"]["replyText"])
    note = {"role": "user", "content": "a note from the python client"}
    ingested = gw.call("ingest", session, {"message": note})["result"]
    refs = gw.call("assemble", session, {"tokenBudget": 100000})["result"]
    if any("message" in item for item in refs["items"]):
        raise SystemExit("assemble by reference sent messages")
    full = gw.call("assemble", session, {"full": True})["result"]
    # References come as runs {from, to, count} of consecutive messages of the session's
    # context (and {entryId} for single ones): resolved against the context's entry ids.
    context = [item["entryId"] for item in full["items"]]
    reference_ids = []
    for item in refs["items"]:
        if "entryId" in item:
            reference_ids.append(item["entryId"])
            continue
        start = context.index(item["from"])
        run = context[start:start + item["count"]]
        if run[-1] != item["to"]:
            raise SystemExit(f"a run that does not end at its 'to': {item} in {context}")
        reference_ids.extend(run)
    if refs["count"] != len(reference_ids):
        raise SystemExit(f"count {refs['count']} but {len(reference_ids)} references")
    texts = []
    for item in full["items"]:
        content = item["message"]["content"]
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content)
        texts.append(content)
    if texts[-1] != note["content"]:
        raise SystemExit(f"the ingested note is not last in the context: {texts}")
    gw.call("afterTurn", session, {"prePromptMessageCount": len(full["items"]) - 1})
    gw.call("maintain", session, {"reason": "turn"})
    health = gw.call("health")["result"]
    print(json.dumps({
        "replies": replies,
        "servedBy": sorted(list(x) for x in served_by),
        "ingestedEntry": ingested["entryIds"][0],
        "referenceEntryIds": reference_ids,
        "contextTexts": texts,
        "health": health,
    }))


if __name__ == "__main__":
    main()
