#!/usr/bin/python3
"""SigV4 oracle for tests/unit/remote_sigv4_test.cpp: signs each request of standard input (one
JSON object a line) with Debian's python3-botocore (S3SigV4Auth) and writes the Authorization
header it computed, one JSON object a line. It signs; it serves nothing."""
import datetime
import json
import sys
from unittest import mock

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def sign(req):
    creds = Credentials(req["access_key"], req["secret_key"], req.get("token") or None)
    body = bytes.fromhex(req["body_hex"])
    request = AWSRequest(method=req["method"], url=req["scheme"] + "://" + req["host"] + req["path"],
                         headers=dict(req["headers"]), data=body)
    request.params = [tuple(p) for p in req["query"]]
    auth = S3SigV4Auth(creds, "s3", req["region"])
    when = datetime.datetime.utcfromtimestamp(req["time"])
    with mock.patch("botocore.auth.datetime") as dt:
        dt.datetime.utcnow.return_value = when
        dt.datetime.strptime = datetime.datetime.strptime
        auth.add_auth(request)
    return {"authorization": request.headers["Authorization"],
            "canonical_request": auth.canonical_request(request)}


def main():
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(sign(json.loads(line))) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
