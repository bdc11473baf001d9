// An agent in Node.js (18+, fetch built in) for an online memrl run: N episodes, then it exits.
//   MEMRL_SESSION_KEY=... node agent.mjs [N] [URL]
const [n = "4", url = "http://127.0.0.1:8321"] = process.argv.slice(2);
const bearer = (key) => ({ Authorization: `Bearer ${key}`, "Content-Type": "application/json" });
const session = bearer(process.env.MEMRL_SESSION_KEY);

async function post(where, body, headers = session) {
  const r = await fetch(where, { method: "POST", headers, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${where}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function nextEpisode() {
  for (;;) {  // a 503 while none waits (or the run not up yet): ask again
    const ep = await post(`${url}/rl/episodes`, { wait_s: 4 }).catch(() => null);
    if (ep) return ep;
    await new Promise((resume) => setTimeout(resume, 1000));
  }
}

for (let i = 0; i < Number(n); i++) {
  const ep = await nextEpisode();
  const messages = [{ role: "user", content: ep.sample.question }];
  const answer = await post(`${ep.base_url}/chat/completions`, { model: ep.model, max_tokens: 64, messages },
                            bearer(ep.api_key));
  const reply = answer.choices[0].message.content;
  const reward = reply.includes(String(ep.sample.answer)) ? 1 : 0;
  // the episode's reward, and call 0's own (per-call rewards feed gigpo / step_reinforce)
  await post(ep.reward_url, { reward, turn_rewards: [{ call: 0, reward: reply.length > 0 ? 0.1 : 0 }] });
  console.log(`episode ${ep.id}: reward ${reward}`);
}
