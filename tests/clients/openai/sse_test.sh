#!/usr/bin/env bash
# Raw server-sent-event framing of a streamed completion, seen by curl: the headers, every event
# a "data: <JSON>" line followed by a blank line, the last one "data: [DONE]"; and error bodies
# in OpenAI's shape. Run by run.sh (LINSERVE_HTTP, LINSERVE_TOKEN).
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
auth="Authorization: Bearer $LINSERVE_TOKEN"

for endpoint in completions chat/completions; do
  if [[ $endpoint == completions ]]; then
    input='"prompt": "ROMEO:\n"'
  else
    input='"messages": [{"role": "user", "content": "Hark"}]'
  fi
  curl -sS -N -D "$out/headers" -o "$out/body" -H "$auth" -H 'Content-Type: application/json' \
    -d "{\"model\": \"shakespeare-linear\", $input, \"max_tokens\": 6, \"ignore_eos\": true,
         \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
    "$LINSERVE_HTTP/v1/$endpoint"
  grep -q '^HTTP/1.1 200' "$out/headers"
  grep -qi '^content-type: text/event-stream' "$out/headers"
  grep -qi '^transfer-encoding: chunked' "$out/headers"
  python3 - "$out/body" "$endpoint" <<'PY'
import json, sys
body = open(sys.argv[1], encoding="utf-8").read()
assert body.endswith("data: [DONE]\n\n"), repr(body[-40:])
events = body.split("\n\n")
assert events[-1] == "", "the body ends with a blank line"
events = events[:-1]
assert events[-1] == "data: [DONE]"
chunks = []
for event in events[:-1]:
    assert event.startswith("data: ") and "\n" not in event, repr(event)
    chunks.append(json.loads(event[len("data: "):]))
usage = chunks[-1]
assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6, usage
assert chunks[-2]["choices"][0]["finish_reason"] == "length", chunks[-2]
assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
expected = "chat.completion.chunk" if sys.argv[2] == "chat/completions" else "text_completion"
assert all(c["object"] == expected and c["id"] == chunks[0]["id"] for c in chunks)
PY
done

# Errors: a status and {"error": {"message", "type", "param", "code"}}.
check_error() {  # STATUS PARAM CURL_ARGS...
  local status=$1 param=$2
  shift 2
  code=$(curl -sS -o "$out/error" -w '%{http_code}' "$@")
  [[ $code == "$status" ]] || { echo "expected $status, got $code: $(cat "$out/error")"; exit 1; }
  python3 - "$out/error" "$param" <<'PY'
import json, sys
error = json.load(open(sys.argv[1]))["error"]
assert set(error) == {"message", "type", "param", "code"}, error
assert error["param"] == (sys.argv[2] or None), error
PY
}
check_error 401 '' "$LINSERVE_HTTP/v1/models"
check_error 401 '' -H 'Authorization: Bearer nope' "$LINSERVE_HTTP/v1/models"
check_error 400 body -H "$auth" -d 'not json' "$LINSERVE_HTTP/v1/completions"
check_error 400 top_k -H "$auth" \
  -d '{"model": "shakespeare-linear", "prompt": "x", "top_k": "many"}' "$LINSERVE_HTTP/v1/completions"
check_error 404 model -H "$auth" -d '{"model": "other", "prompt": "x"}' \
  "$LINSERVE_HTTP/v1/completions"
echo "SSE framing and error bodies as expected"
