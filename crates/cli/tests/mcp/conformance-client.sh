#!/usr/bin/env bash
# The upstream MCP client under the conformance suite's client scenarios:
# `conformance client --command "conformance-client.sh HARNESS"` appends
# the scenario server's URL and names the scenario in
# MCP_CONFORMANCE_SCENARIO. A configuration names that server, and a
# script does what the scenario asks of a client.
set -euo pipefail
harness="$1"
url="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
config="$dir/harness.toml"
printf '[mcp.servers.s]\nurl = "%s"\n' "$url" > "$config"
scenario="${MCP_CONFORMANCE_SCENARIO:-}"
case "$scenario" in
    tools_call) script='return await tools.mcp.s.add_numbers({a: 2, b: 3})' ;;
    sse-retry) script='return await tools.mcp.s.test_reconnection({})' ;;
    elicitation-sep1034-client-defaults) script='return await tools.mcp.s.test_client_elicitation_defaults({})' ;;
    auth/*) script='return await tools.mcp.s["test-tool"]({})' ;;
    *) script='return Object.keys((tools.mcp && tools.mcp.s) || {})' ;;
esac
run() {
    # A person who approves every form as it stands: an upstream elicitation
    # reaches the run's approvals, which answer with the form's defaults.
    echo "$script" | "$harness" run --config "$config" --approve yes --json -
}
case "$scenario" in
    auth/*) ;;
    *) run; exit ;;
esac

# The authorization scenarios: a person runs `harness mcp login s` once and
# opens the URL it prints; here curl is that person's browser (the suite's
# authorization endpoint answers at once with a redirect to the loopback
# address `harness mcp login` waits on). Then the run uses the stored token.
printf 'auth = "oauth"\ntoken_file = "%s"\n' "$dir/tokens.json" >> "$config"
context="${MCP_CONFORMANCE_CONTEXT:-}"
if [ -n "$context" ]; then
    field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2]) or "")' "$context" "$1"; }
    id="$(field client_id)"
    if [ -n "$id" ]; then
        printf 'client_id = "%s"\nclient_secret_env = "CONFORMANCE_CLIENT_SECRET"\n' "$id" >> "$config"
        CONFORMANCE_CLIENT_SECRET="$(field client_secret)"
        export CONFORMANCE_CLIENT_SECRET
    fi
fi
# Where the server supports client metadata documents, the client's own.
printf 'client_metadata_url = "https://conformance-test.local/client-metadata.json"\n' >> "$config"

login() {
    local log="$dir/login.log"
    : > "$log"
    "$harness" mcp login s --config "$config" 2> "$log" &
    local pid=$! link=""
    for _ in $(seq 1 300); do
        link="$(grep -m1 '^http' "$log" || true)"
        [ -n "$link" ] || ! kill -0 "$pid" 2>/dev/null && break
        sleep 0.1
    done
    [ -n "$link" ] && curl -s -o /dev/null -L --max-time 20 "$link" || true
    local rc=0
    wait "$pid" || rc=$?
    cat "$log" >&2
    return $rc
}
# What the harness must hold to: the token file is the user's alone, and
# no token reaches a report.
guarded() {
    local out="$1"
    [ "$(stat -c %a "$dir/tokens.json")" = 600 ] || { echo "the token file is not mode 600" >&2; exit 1; }
    local token
    token="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["credentials"]["token_response"]["access_token"])' "$dir/tokens.json")"
    case "$out" in *"$token"*) echo "the access token is in the report" >&2; exit 1 ;; esac
    echo "$out"
}
login || exit 1
if out="$(run)"; then
    guarded "$out"
else
    echo "$out"
    # A call refused for want of scope names `harness mcp login s`, which
    # asks for that scope; a person runs it once, and the run again.
    echo "$out" | grep -q 'harness mcp login s' || exit 1
    login || exit 1
    out="$(run)" || { echo "$out"; exit 1; }
    guarded "$out"
fi
if [ "$scenario" = auth/metadata-default ]; then
    # An expired token with a refresh token: the next run refreshes it
    # (the suite's token endpoint grants a refresh too) and stores the new one.
    python3 - "$dir/tokens.json" <<'PY'
import json, sys
path = sys.argv[1]
saved = json.load(open(path))
saved["credentials"]["token_received_at"] = 1
saved["credentials"]["token_response"]["refresh_token"] = "conformance-refresh"
json.dump(saved, open(path, "w"))
PY
    before="$(sha256sum < "$dir/tokens.json")"
    out="$(run)" || { echo "$out"; exit 1; }
    guarded "$out" > /dev/null
    [ "$(sha256sum < "$dir/tokens.json")" != "$before" ] || { echo "the expired token was not refreshed" >&2; exit 1; }
fi
