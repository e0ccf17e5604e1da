"""Verifies the gateway's webhook deliveries with the official Standard
Webhooks library, through the recipe in docs/limits.md as written there.

argv[1]: a file holding the recipe (it reads the secret from
GATEWAY_WEBHOOK_SECRET and defines verify(body, headers)). stdin: a JSON
list of deliveries, each {"secret", "body", "headers"}. Exits non-zero
unless every delivery verifies as the event it carries, and the same
delivery with its body changed does not.
"""

import json
import os
import sys

from standardwebhooks import WebhookVerificationError

recipe = open(sys.argv[1]).read()
deliveries = json.load(sys.stdin)
for d in deliveries:
    os.environ["GATEWAY_WEBHOOK_SECRET"] = d["secret"]
    ns: dict = {}
    exec(recipe, ns)
    body = d["body"].encode()
    event = ns["verify"](body, d["headers"])
    if event["id"] != d["headers"]["webhook-id"]:
        sys.exit(f"verified {event['id']}, delivered as {d['headers']['webhook-id']}")
    try:
        ns["verify"](body.replace(b'"type"', b'"typ"'), d["headers"])
    except WebhookVerificationError:
        pass
    else:
        sys.exit(f"a changed body of {event['id']} verified")
print(f"{len(deliveries)} deliveries verified")
