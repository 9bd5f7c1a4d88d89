#!/usr/bin/env bash
# Structured output at scale (structured_validity.py): every constraint kind, thousands of seeded
# samples each, validated independently. Run by run.sh (LINSERVE_HTTP, LINSERVE_TOKEN);
# LINSERVE_STRUCTURED_SAMPLES samples per case (default 2000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
/usr/bin/python3 "$here/structured_validity.py" "${LINSERVE_STRUCTURED_SAMPLES:-2000}"
