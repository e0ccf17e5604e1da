// The OpenAI JavaScript SDK's Responses API and embeddings, as a client of
// the gateway. clients_test.go runs it with the pinned Node and checks the
// ledger afterwards; every check here throws on failure.
import assert from "node:assert/strict";
import OpenAI, { NotFoundError } from "openai";

const env = process.env;
const baseURL = env.GATEWAY_URL + "/beta/v1";
const client = new OpenAI({ apiKey: env.GATEWAY_KEY, baseURL, maxRetries: 0 });
const other = new OpenAI({ apiKey: env.GATEWAY_OTHER_KEY, baseURL, maxRetries: 0 });
const model = env.GATEWAY_RESPONSES_MODEL;

// responses.create, JSON.
const r = await client.responses.create({ model, instructions: "Be brief.", input: "Hello from JavaScript" });
assert.equal(r.status, "completed");
assert.match(r.output_text, /^Echo:/);
assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);

// responses.create, streamed.
const stream = await client.responses.create({ model, input: "Stream to me", stream: true });
let text = "";
let completed;
for await (const ev of stream) {
  if (ev.type === "response.output_text.delta") text += ev.delta;
  if (ev.type === "response.completed") completed = ev.response;
}
assert.match(text, /^Echo:/);
assert.ok(completed && completed.usage.output_tokens > 0);

// retrieve, input_items.list, input_tokens.count, a continued turn: free
// but the turn.
const got = await client.responses.retrieve(r.id);
assert.equal(got.id, r.id);
const items = [];
for await (const it of client.responses.inputItems.list(r.id)) items.push(it);
assert.ok(items.length >= 1);
const count = await client.responses.inputTokens.count({ model, input: "more", previous_response_id: r.id });
assert.ok(count.input_tokens > 0);
const next = await client.responses.create({ model, input: "And then?", previous_response_id: r.id });
assert.equal(next.previous_response_id, r.id);

// compact: metered.
const compacted = await client.responses.compact({ model, input: "A long conversation to compact" });
assert.equal(compacted.object, "response.compaction");

// A background response, polled to its end; another, cancelled.
const bg = await client.responses.create({ model, input: "Work in the background", background: true });
assert.equal(bg.status, "queued");
let polled = bg;
for (let i = 0; i < 20 && polled.status !== "completed"; i++) polled = await client.responses.retrieve(bg.id);
assert.equal(polled.status, "completed");
const bg2 = await client.responses.create({ model, input: "Cancel me", background: true }, { headers: { "x-fake-controls": '{"background_polls":5}' } });
const cancelled = await client.responses.cancel(bg2.id);
assert.equal(cancelled.status, "cancelled");

// Another account sees none of it.
for (const attempt of [
  () => other.responses.retrieve(r.id),
  () => other.responses.delete(r.id),
  () => other.responses.cancel(bg.id),
  () => other.responses.inputItems.list(r.id),
  () => other.responses.create({ model, input: "steal", previous_response_id: r.id }),
]) {
  await assert.rejects(attempt, (e) => e instanceof NotFoundError && e.status === 404);
}

// delete: the owner may.
await client.responses.delete(r.id);
await assert.rejects(() => client.responses.retrieve(r.id), (e) => e instanceof NotFoundError);

// embeddings.create (the SDK asks for base64 and decodes it).
const emb = await client.embeddings.create({ model: env.GATEWAY_EMBEDDING_MODEL, input: ["one", "two"] });
assert.equal(emb.data.length, 2);
assert.ok(emb.data[0].embedding.length > 0 && emb.usage.prompt_tokens > 0);

console.log(JSON.stringify({ ids: [r.id, completed.id, next.id, bg.id, bg2.id] }));
