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
printf '[mcp.servers.s]\nurl = "%s"\n' "$url" > "$dir/harness.toml"
case "${MCP_CONFORMANCE_SCENARIO:-}" in
    tools_call) script='return await tools.mcp.s.add_numbers({a: 2, b: 3})' ;;
    sse-retry) script='return await tools.mcp.s.test_reconnection({})' ;;
    elicitation-sep1034-client-defaults) script='return await tools.mcp.s.test_client_elicitation_defaults({})' ;;
    *) script='return Object.keys((tools.mcp && tools.mcp.s) || {})' ;;
esac
# A person who approves every form as it stands: an upstream elicitation
# reaches the run's approvals, which answer with the form's defaults.
echo "$script" | "$harness" run --config "$dir/harness.toml" --approve yes --json -
