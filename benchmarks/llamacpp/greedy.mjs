// llama.cpp's own greedy tokens for given input ids, through node-llama-cpp's prebuilt CPU binaries.
//
// Reads one JSON object on stdin:
//   {"model": "FILE.gguf", "new_tokens": 32, "threads": 2, "kv_cache_type": "F16",
//    "prompts": [{"text": "The capital of France is", "ids": [1, 2, 3]}, ...]}
// and prints one JSON object on stdout:
//   {"llama_cpp": {"release": ..., "repo": ..., "build_type": ..., "system_info": ...},
//    "results": [{"tokens": [...], "top2": [[[id, logit], [id, logit]], ...], "own_ids": [...]}, ...]}
//
// Each prompt gets a fresh context on the CPU (no GPU layers). The given ids are evaluated as they
// are (the caller passes Hugging Face's tokenization, so tokenizer differences do not count), then
// `new_tokens` tokens are generated greedily: temperature 0 (argmax), no repetition penalty, no stop
// at an end-of-generation token. `top2` holds llama.cpp's two largest logits at each step, so the
// caller can see how close a step was; `own_ids` is llama.cpp's own tokenization of `text` (with its
// BOS token where the model's metadata asks for one), for comparison with the given ids.
// A prompt may also carry `forced` (a continuation, e.g. another runtime's greedy tokens) and
// `watch` (per step, token ids): then `forced` holds llama.cpp's logits along that continuation,
// see teacherForced(). `kv_cache_type` (default F16, llama.cpp's default) sets the KV cache's type;
// with F32 flash attention is turned off too, so that attention is computed in float32.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function ownTokenization(model, text) {
  const ids = model.tokenize(text, false);
  const bos = model.tokens.bos;
  return model.tokens.shouldPrependBosToken && bos != null ? [bos, ...ids] : ids;
}

let kvCacheType = "F16";

function contextOptions(contextSize, threads) {
  const options = { contextSize, batchSize: contextSize, sequences: 1, threads };
  if (kvCacheType !== "F16") {
    options.experimentalKvCacheKeyType = kvCacheType;
    options.experimentalKvCacheValueType = kvCacheType;
    options.flashAttention = false;
  }
  return options;
}

async function greedy(model, ids, newTokens, threads) {
  const contextSize = ids.length + newTokens + 8;
  const context = await model.createContext(contextOptions(contextSize, threads));
  try {
    const sequence = context.getSequence();
    const next = {
      token: true,
      logits: { filter: { tokens: [], includeTop: 2 } },
      options: { temperature: 0 },
    };
    const tokens = [];
    const top2 = [];
    let input = [...ids.slice(0, -1), [ids[ids.length - 1], { generateNext: next }]];
    while (tokens.length < newTokens) {
      const out = await sequence.controlledEvaluate(input);
      const result = out[input.length - 1]?.next;
      if (result?.token == null) throw new Error("llama.cpp returned no next token");
      tokens.push(result.token);
      const logits = [...result.logits.entries()].sort((a, b) => b[1] - a[1]).slice(0, 2);
      top2.push(logits);
      input = [[result.token, { generateNext: next }]];
    }
    return { tokens, top2 };
  } finally {
    await context.dispose();
  }
}

// The logits llama.cpp gives along a fixed continuation (`forced`, fed in one batch after the
// prompt): at each of its positions (after the prompt, then after each forced token but the last)
// the logits of the tokens in `watch[step]` and llama.cpp's own top 2.
async function teacherForced(model, prompt, threads) {
  const { ids, forced, watch } = prompt;
  const contextSize = ids.length + forced.length + 8;
  const context = await model.createContext(contextOptions(contextSize, threads));
  try {
    const sequence = context.getSequence();
    const sequenceIds = [...ids, ...forced.slice(0, -1)];
    const first = ids.length - 1;
    const input = sequenceIds.map((token, index) =>
      index < first
        ? token
        : [
            token,
            {
              generateNext: {
                logits: { filter: { tokens: watch[index - first], includeTop: 2 } },
              },
            },
          ],
    );
    const out = await sequence.controlledEvaluate(input);
    const steps = [];
    for (let index = first; index < input.length; index++) {
      const logits = out[index]?.next?.logits;
      if (logits == null) throw new Error(`llama.cpp returned no logits at position ${index}`);
      const top2 = [...logits.entries()].sort((a, b) => b[1] - a[1]).slice(0, 2);
      const watched = watch[index - first].map((token) => [token, logits.get(token)]);
      steps.push({ top2, watched });
    }
    return steps;
  } finally {
    await context.dispose();
  }
}

const request = await readStdin();
kvCacheType = request.kv_cache_type ?? "F16";
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: request.model, gpuLayers: 0 });
const results = [];
for (const prompt of request.prompts) {
  const { tokens, top2 } = await greedy(model, prompt.ids, request.new_tokens, request.threads ?? 2);
  const result = { tokens, top2, own_ids: ownTokenization(model, prompt.text) };
  if (prompt.forced) result.forced = await teacherForced(model, prompt, request.threads ?? 2);
  results.push(result);
}
const release = llama.llamaCppRelease;
process.stdout.write(
  JSON.stringify({
    llama_cpp: {
      repo: release.repo,
      release: release.release,
      build_type: llama.buildType,
      gpu: llama.gpu,
      system_info: llama.systemInfo,
      kv_cache_type: kvCacheType,
    },
    results,
  }) + "\n",
);
await model.dispose();
await llama.dispose();
