#!/usr/bin/env bash
# An agent in bash (curl + jq) for an online memrl run: N episodes, then it exits.
#   MEMRL_SESSION_KEY=... bash agent.sh [N] [URL]
set -euo pipefail
url=${2:-http://127.0.0.1:8321}
auth="Authorization: Bearer $MEMRL_SESSION_KEY"
json='Content-Type: application/json'
for ((i = 0; i < ${1:-4}; i++)); do
  # an episode: its id, base_url, api_key, reward_url and sample (a 503 while none waits: ask again)
  until ep=$(curl -sf -X POST "$url/rl/episodes" -H "$auth" -H "$json" -d '{"wait_s": 4}'); do sleep 1; done
  base=$(jq -r .base_url <<<"$ep")
  key=$(jq -r .api_key <<<"$ep")
  # the agent's model calls: any API of the gateway, on the episode's base URL with its key
  request=$(jq '{model: .model, max_tokens: 64, messages: [{role: "user", content: .sample.question}]}' <<<"$ep")
  reply=$(curl -sf "$base/chat/completions" -H "Authorization: Bearer $key" -H "$json" -d "$request" |
    jq -r '.choices[0].message.content')
  reward=0
  [[ $reply == *"$(jq -r .sample.answer <<<"$ep")"* ]] && reward=1
  curl -sf -X POST "$(jq -r .reward_url <<<"$ep")" -H "$auth" -H "$json" \
    -d "{\"reward\": $reward, \"metrics\": {\"reply_chars\": ${#reply}}}" >/dev/null
  echo "episode $(jq -r .id <<<"$ep"): reward $reward"
done
