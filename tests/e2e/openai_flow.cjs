// The Batch API flow with OpenAI's own Node client (npm `openai`): upload, create, poll,
// download, list, and cancel a second batch. Run by tests/e2e/test_batch_api_node.py with
// NODE_PATH pointing at the pinned package; prints one JSON summary line for the test.
// Usage: node openai_flow.cjs BASE_URL API_KEY REQUESTS_JSONL
const fs = require("fs");
const { OpenAI, toFile } = require("openai");

const [baseURL, apiKey, inputPath] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const endpoint = "/v1/chat/completions";

async function waitFor(id, wanted) {
  for (let i = 0; i < 600; i++) {
    const batch = await client.batches.retrieve(id);
    if (wanted.includes(batch.status)) return batch;
    if (["failed", "expired"].includes(batch.status)) throw new Error(`batch ${batch.status}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`batch ${id} did not reach ${wanted}`);
}

async function main() {
  const file = await client.files.create({
    file: await toFile(fs.readFileSync(inputPath), "requests.jsonl"),
    purpose: "batch",
  });
  const batch = await client.batches.create({
    input_file_id: file.id, endpoint, completion_window: "24h", metadata: { from: "node" },
  });
  const done = await waitFor(batch.id, ["completed"]);
  const text = await (await client.files.content(done.output_file_id)).text();
  const customIds = text.trim().split("\n").map((line) => JSON.parse(line).custom_id);
  const second = await client.batches.create({ input_file_id: file.id, endpoint, completion_window: "24h" });
  const cancelling = await client.batches.cancel(second.id);
  const cancelled = await waitFor(second.id, ["cancelled"]);
  const listed = [];
  for await (const item of client.batches.list({ limit: 1 })) listed.push(item.id);
  const files = [];
  for await (const item of client.files.list()) files.push(item.id);
  let missing = null;
  try {
    await client.batches.retrieve("batch_" + "0".repeat(32));
  } catch (error) {
    missing = error.status;
  }
  console.log(JSON.stringify({
    fileId: file.id, batchId: batch.id, status: done.status, counts: done.request_counts,
    metadata: done.metadata, customIds, cancelling: cancelling.status, cancelled: cancelled.status,
    secondId: second.id, listed, files, missing,
  }));
}

main().catch((error) => {
  console.error(`openai_flow: ${error.stack || error}`);
  process.exit(1);
});
