"""The Batch API quickstart: a program written for OpenAI's Batch API, run on longrun.

Only `base_url` and `api_key` differ from a program that sends the batch to OpenAI.
"""

import json
import os
import time

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("BATCH_API_URL", "http://127.0.0.1:8000/v1"),  # OpenAI: omitted
    api_key=os.environ["BATCH_API_KEY"],  # OpenAI: your OpenAI key
)

topics = ["the sea", "a cat", "tea", "rain", "a bridge", "autumn", "a robot", "bread"]
with open("requests.jsonl", "w") as requests:
    for i in range(100):
        question = {"role": "user", "content": f"Say something about {topics[i % 8]}."}
        body = {"model": "tiny-chat", "messages": [question], "max_tokens": 8}
        line = {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions"}
        requests.write(json.dumps({**line, "body": body}) + "\n")

with open("requests.jsonl", "rb") as requests:
    batch_input = client.files.create(file=requests, purpose="batch")
batch = client.batches.create(
    input_file_id=batch_input.id, endpoint="/v1/chat/completions", completion_window="24h"
)
while batch.status not in ("completed", "failed", "expired", "cancelled"):
    print(f"batch {batch.id}: {batch.status} {batch.request_counts}")
    time.sleep(1)
    batch = client.batches.retrieve(batch.id)
print(f"batch {batch.id}: {batch.status} {batch.request_counts}")

results = client.files.content(batch.output_file_id).text.splitlines()
for result in sorted(map(json.loads, results), key=lambda r: int(r["custom_id"][1:])):
    answer = result["response"]["body"]["choices"][0]["message"]["content"]
    print(f"{result['custom_id']}: {answer!r}")
print(f"{len(results)} answers, {batch.request_counts.failed} failed")
