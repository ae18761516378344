/* tandem C API: load a GGUF model (and optionally a draft model), generate text with
 * streaming and speculative decoding, tokenize and detokenize.
 *
 * Plain C99 types only, so it can be used from C and through any FFI (Python ctypes/cffi,
 * Rust, Go, ...). No C++ exception ever crosses this boundary.
 *
 * Conventions
 *  - Functions return a tandem_status: TANDEM_OK (0) on success, a negative TANDEM_ERR_*
 *    code on failure. tandem_last_error() then describes the failure in English.
 *  - Handles (tandem_engine*, tandem_result*) are opaque or library-allocated and freed with
 *    the matching *_free function; freeing NULL is a no-op.
 *  - Parameter structs start with `struct_size`: initialise them with the *_init function,
 *    passing sizeof the struct as your program sees it. A library newer than your header
 *    then uses defaults for the fields your program does not know about, so programs built
 *    against an older header keep working with a newer libtandem (same major version).
 *  - Strings are NUL-terminated UTF-8 unless a length is given.
 *
 * Thread safety
 *  - tandem_last_error() is per thread.
 *  - A tandem_engine may be shared between threads: tandem_generate* calls on one engine run
 *    one at a time (later callers wait); tandem_tokenize, tandem_detokenize,
 *    tandem_engine_info and tandem_engine_cancel may be called at any time from any thread.
 *    tandem_engine_free must not overlap any other call on that engine.
 *  - Separate engines are independent and run in parallel (each has its own threads).
 *  - A tandem_result belongs to the caller; it is not tied to its engine. */
#ifndef TANDEM_TANDEM_H
#define TANDEM_TANDEM_H

#include <stddef.h>
#include <stdint.h>

#include "tandem/export.h"

/* The version of this header. tandem_version() gives the library's. */
#define TANDEM_VERSION_MAJOR 0
#define TANDEM_VERSION_MINOR 1
#define TANDEM_VERSION_PATCH 0
#define TANDEM_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tandem_status {
  TANDEM_OK = 0,
  /* Not an error: the generation was cancelled (stream callback returned non-zero, or
   * tandem_engine_cancel). The result holds the output produced until then. */
  TANDEM_CANCELLED = 1,
  TANDEM_ERR_INVALID_ARGUMENT = -1, /* NULL/invalid handle or pointer, bad option value, prompt too long */
  TANDEM_ERR_LOAD = -2,             /* model file missing, unreadable, corrupt, unsupported, or draft incompatible */
  TANDEM_ERR_BUFFER_TOO_SMALL = -3, /* the required size was stored; call again with a larger buffer */
  TANDEM_ERR_OUT_OF_MEMORY = -4,
  TANDEM_ERR_RUNTIME = -5,          /* failure while generating (e.g. the KV cache is full) */
  TANDEM_ERR_INTERNAL = -6          /* unexpected failure inside the library (a bug: please report) */
} tandem_status;

typedef enum tandem_finish_reason {
  TANDEM_FINISH_STOP = 0,      /* end-of-generation token, a stop token id or a stop string */
  TANDEM_FINISH_LENGTH = 1,    /* max_tokens or the context limit reached */
  TANDEM_FINISH_CANCELLED = 2  /* stream callback returned non-zero or tandem_engine_cancel */
} tandem_finish_reason;

typedef enum tandem_draft_mode {
  TANDEM_DRAFT_NONE = 0,   /* plain autoregressive decoding */
  TANDEM_DRAFT_MODEL = 1,  /* the draft model given at load time proposes tokens */
  TANDEM_DRAFT_NGRAM = 2   /* prompt lookup: continue an earlier occurrence of the last n tokens */
} tandem_draft_mode;

/* How sampled output is drawn and drafts are verified (both exact; see speculative.hpp). */
typedef enum tandem_verify_mode {
  TANDEM_VERIFY_REJECTION = 0, /* rejection sampling: most acceptance; the text for a seed depends on k and batch */
  TANDEM_VERIFY_COUPLED = 1    /* (default) Gumbel-max keyed by (seed, position): one text per seed, any speculation */
} tandem_verify_mode;

typedef struct tandem_engine tandem_engine; /* opaque */

typedef struct tandem_load_params {
  size_t struct_size;
  const char* model_path;        /* required: a GGUF file or a Hugging Face model folder */
  const char* draft_model_path;  /* NULL or "" → no draft model; must share the target's vocabulary */
  int32_t threads;               /* 0 → one per available core */
  int32_t context;               /* max tokens per sequence; 0 → min(model's training context, 4096) */
  const char* kv_type;           /* NULL → "f16"; or "f32" */
  const char* device;            /* NULL → "auto" (CUDA when built with it and a device is present,
                                    else the CPU); "cpu", "cuda", "cuda-emulated" (tests) */
  int32_t pin_threads;           /* non-zero: bind each CPU worker thread to one core */
  uint64_t gpu_mem_bytes;        /* CUDA: device memory for both models, caches and scratch;
                                    0 → 90% of the free device memory */
  /* appended after 0.1.0 (older callers pass a shorter struct_size): */
  int32_t draft_vocab;            /* the draft computes logits over its N most frequent tokens only
                                     (FR-Spec; outputs unchanged); 0 → the whole vocabulary */
  const char* draft_vocab_counts; /* NULL → rank by token id; else a counts file (`tandem draft-vocab`) */
  const char* draft_type;         /* NULL or "auto" → the draft's matrices stored above 5 bits per weight
                                     (Q5_0, Q5_1, Q5_K, Q6_K, Q8_0) re-quantized to Q4_0 at load; "keep" → as
                                     stored; "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k": every matrix re-quantized
                                     to it (outputs unchanged either way) */
  const char* weight_type;        /* NULL or "keep" → the target's matrices as stored; "q4_0", "q4_1", "q5_0",
                                     "q5_1", "q8_0", "q4_k": quantized to it at load (for float models, e.g. a
                                     Hugging Face folder's bf16; the output is the quantized model's) */
} tandem_load_params;

/* Speculative decoding never changes greedy output, and keeps the sampled output's
 * distribution: it only changes speed. */
typedef struct tandem_generate_params {
  size_t struct_size;
  int32_t max_tokens;            /* default 128 */
  /* sampling */
  float temperature;             /* default 0.8; <= 0 → greedy */
  int32_t top_k;                 /* default 40; <= 0 → off */
  float top_p;                   /* default 0.95; >= 1 → off */
  float min_p;                   /* default 0.05; <= 0 → off */
  float repetition_penalty;      /* default 1 (off) */
  int32_t repetition_window;     /* default 64; < 0 → whole history */
  float presence_penalty;        /* default 0 */
  float frequency_penalty;       /* default 0 */
  uint64_t seed;                 /* default TANDEM_SEED_RANDOM: a fresh seed from the system's random source
                                    for each call (tandem_result.seed reports it); any other value is used as
                                    given, so the same seed gives the same text */
  /* output */
  const char* const* stop;       /* n_stop strings; generation ends before the first occurrence */
  size_t n_stop;
  int32_t add_special;           /* default 1: prepend BOS etc. as the model's metadata says */
  int32_t parse_special;         /* default 1: special-token texts in the prompt become special tokens */
  int32_t ignore_eos;            /* default 0 */
  /* speculative decoding */
  int32_t draft_mode;            /* a tandem_draft_mode; default TANDEM_DRAFT_NONE */
  int32_t draft_max;             /* default 4: tokens drafted per step */
  int32_t draft_min;             /* default 0: fewer drafted tokens than this → plain step */
  float draft_p_min;             /* default 0: stop drafting when the draft's top probability is below this */
  int32_t ngram_min;             /* default 1 */
  int32_t ngram_max;             /* default 4 */
  /* appended later (a caller built with an older header gets the default) */
  int32_t verify_mode;           /* a tandem_verify_mode; default TANDEM_VERIFY_COUPLED */
  /* Constrained decoding: NULL or "" → none; else a GBNF grammar the output must follow
   * (tandem_json_schema_to_grammar writes one from a JSON Schema). A bad grammar fails the
   * call with TANDEM_ERR_INVALID_ARGUMENT naming line and column. */
  const char* grammar;
  /* Log-probabilities (tandem_result.logprobs, tandem_stream_logprobs_fn). Default -1: none;
   * 0..TANDEM_MAX_TOP_LOGPROBS: each generated token's own and this many most likely
   * alternatives. They are the target model's, of the distribution the token was drawn from
   * (after penalties, temperature, top-k, top-p, min-p; cut tokens have -INFINITY), whatever
   * the speculation; greedy requests get the log-softmax of the penalised logits. */
  int32_t logprobs;
  /* How many tokens to draft at each step. NULL or "" → "fixed" (always draft_max);
   * "confidence" (drafting stops below draft_p_min, 0.5 when 0); "adaptive" (k from the
   * acceptance seen so far and the engine's cost model, speculation off where it would be
   * slower); "goodput" (adaptive, k shrinking as the batch grows: the CLI's and the server's
   * default). The adaptive ones use the cost model tandem_engine_calibrate installs, else
   * assumed costs. Outputs are the same under every policy. */
  const char* policy;
  float alpha_prior;             /* adaptive/goodput: acceptance expected before any evidence; 0 → 0.6 */
  float start_budget;            /* adaptive/goodput: share of the output still to come a sequence's first
                                    draft may risk were nothing accepted; 0 → 0.02; < 0 → no limit */
  /* Draft-model speculation: prompt lookup ahead of the draft (default 1: on). Where the last
   * lookup_min (default 3) or more tokens occurred before, what followed them is a free draft,
   * verified instead of the draft model's while such drafts pay more. Outputs are unchanged. */
  int32_t lookup;
  int32_t lookup_min;
  /* Token trees (draft-model speculation): tree_width > 1 drafts a tree of up to tree_width
   * children a node and tree_nodes nodes (0: tree_width x draft_max, at most 64), verified in
   * one target pass; outputs are unchanged. Default 1: chains. */
  int32_t tree_width;
  int32_t tree_nodes;
  /* Prompt log-probabilities (tandem_result.prompt_logprobs). Default -1: none;
   * 0..TANDEM_MAX_TOP_LOGPROBS: each prompt token after the first gets its log-probability given
   * the tokens before it (the target's raw logits at temperature 1, whatever the sampling) and
   * this many most likely alternatives. With max_tokens 0 nothing is generated: the call only
   * scores the prompt. */
  int32_t prompt_logprobs;
  /* Logit bias, as OpenAI's logit_bias: logit_bias_values[i] (finite; about -100 bans a token,
   * +100 all but forces it) is added to the logit of token logit_bias_tokens[i] after the
   * penalties, before temperature and every cut (greedy takes the biased argmax). Each token
   * at most once and inside the vocabulary, else TANDEM_ERR_INVALID_ARGUMENT. Default: none. */
  const int32_t* logit_bias_tokens;
  const float* logit_bias_values;
  size_t n_logit_bias;
  /* Tokens that end the output when generated, as an end-of-generation token does (vLLM's
   * stop_token_ids; ignore_eos does not lift them): the token is the last of tandem_result.tokens
   * and adds no text; finish reason TANDEM_FINISH_STOP. Each inside the vocabulary, else
   * TANDEM_ERR_INVALID_ARGUMENT. Default: none. */
  const int32_t* stop_token_ids;
  size_t n_stop_token_ids;
} tandem_generate_params;

#define TANDEM_MAX_TOP_LOGPROBS 20
/* tandem_generate_params.seed: draw a fresh seed for each call (the default). */
#define TANDEM_SEED_RANDOM UINT64_MAX

typedef struct tandem_logprob {
  int32_t token;
  float logprob;                 /* natural log */
} tandem_logprob;

/* One generated token's log-probability and the most likely alternatives at its position. */
typedef struct tandem_token_logprobs {
  int32_t token;
  float logprob;
  const tandem_logprob* top;     /* [n_top], most likely first */
  size_t n_top;
} tandem_token_logprobs;

/* Allocated by the library, freed with tandem_result_free. New fields are only ever added
 * at the end; struct_size says how many bytes this library filled in. */
typedef struct tandem_result {
  size_t struct_size;
  const char* text;              /* generated text (NUL-terminated), cut before a stop string */
  size_t text_len;
  const int32_t* tokens;         /* generated tokens (a stop string's tokens included) */
  size_t n_tokens;
  const int32_t* prompt_tokens;
  size_t n_prompt_tokens;
  int32_t finish_reason;         /* a tandem_finish_reason */
  /* timings */
  double prefill_ms;             /* prompt forward, up to the first sampled token */
  double decode_ms;              /* every later token */
  double prefill_tokens_per_s;
  double decode_tokens_per_s;
  /* speculative decoding (zero without it) */
  int64_t spec_drafts;           /* verification steps that carried at least one draft token */
  int64_t spec_drafted_tokens;
  int64_t spec_accepted_tokens;
  double spec_acceptance_rate;   /* accepted / drafted */
  double spec_mean_accepted_length; /* tokens per draft step, the corrected/bonus token included */
  int64_t spec_target_passes;    /* target forward passes while decoding */
  int64_t spec_draft_forwards;   /* draft model forward passes */
  double spec_draft_ms;
  double spec_target_ms;
  double spec_verify_ms;
  const int64_t* spec_drafted_per_position;  /* [spec_n_positions]: steps that drafted position i */
  const int64_t* spec_accepted_per_position; /* [spec_n_positions]: steps whose draft i was accepted */
  size_t spec_n_positions;
  /* appended later: check struct_size >= offsetof(tandem_result, n_logprobs) + sizeof(size_t) */
  const tandem_token_logprobs* logprobs; /* [n_logprobs]: one per token when params.logprobs >= 0 */
  size_t n_logprobs;
  /* appended later: check struct_size >= offsetof(tandem_result, spec_lookup_accepted_tokens) + 8.
   * Prompt lookup's share of the speculative counters above (params.lookup): steps that
   * verified a lookup draft instead of the draft model's, and their drafted / accepted tokens. */
  int64_t spec_lookup_steps;
  int64_t spec_lookup_drafted_tokens;
  int64_t spec_lookup_accepted_tokens;
  /* appended later: check struct_size >= offsetof(tandem_result, seed) + 8. The seed the output
   * was drawn with (params.seed, or the one drawn for TANDEM_SEED_RANDOM): passing it as
   * params.seed gives the same text again. */
  uint64_t seed;
  /* appended later: check struct_size >= offsetof(tandem_result, spec_tree_steps) + 8. Steps
   * that verified a token tree (params.tree_width); spec_drafted_tokens counts its nodes, the
   * per-position counts are by depth. */
  int64_t spec_tree_steps;
  /* appended later: check struct_size >= offsetof(tandem_result, n_prompt_logprobs) + sizeof(size_t).
   * [n_prompt_logprobs]: one per prompt token after the first (entry i is prompt_tokens[i + 1]'s)
   * when params.prompt_logprobs >= 0. */
  const tandem_token_logprobs* prompt_logprobs;
  size_t n_prompt_logprobs;
} tandem_result;

/* Set struct_size before calling tandem_engine_info; the strings belong to the engine. */
typedef struct tandem_model_info {
  size_t struct_size;
  const char* path;
  const char* architecture;      /* "llama", "qwen2", "gemma3" */
  const char* name;
  const char* backend;           /* e.g. "cpu (avx2, 4 threads)" */
  const char* draft_path;        /* "" without a draft model */
  const char* draft_name;
  int32_t n_vocab, n_layer, n_embd, n_head, n_head_kv;
  int32_t context;               /* max tokens per sequence */
  uint64_t weight_bytes, kv_bytes;
  const char* backend_note;      /* why device "auto" chose the CPU (one line), else "" */
  /* appended after 0.1.0 (older callers pass a shorter struct_size): */
  int32_t draft_vocab;           /* the draft's reduced vocabulary size; 0 → the whole one */
  const char* draft_type;        /* "keep", "auto", or the type the draft's matrix weights were re-quantized to; "" without a draft */
  const char* weight_type;       /* "keep", or the type the target's matrix weights were quantized to at load */
} tandem_model_info;

/* Called on the generating thread for every generated token, with the text it completed
 * (len bytes followed by a NUL; len is 0 while a UTF-8 character or a possible stop string
 * is incomplete). Text held back until the end comes in one last call (token = the last
 * token) whose return value is ignored. Return 0 to continue, non-zero to cancel: the
 * generation then stops without another token. The callback must not call tandem_generate*
 * on the same engine (it would wait forever); other calls are fine. */
typedef int (*tandem_stream_fn)(const char* text, size_t len, int32_t token, void* user_data);
/* The same, with the token's log-probabilities (NULL unless params.logprobs >= 0, and in the
 * last call that only flushes held-back text); valid during the call only. */
typedef int (*tandem_stream_logprobs_fn)(const char* text, size_t len, int32_t token,
                                         const tandem_token_logprobs* logprobs, void* user_data);

/* ---- library ------------------------------------------------------------------------ */
TANDEM_API const char* tandem_version(void);  /* e.g. "0.1.0" */
/* The message of the last tandem_* call on this thread: "" when it succeeded. */
TANDEM_API const char* tandem_last_error(void);
TANDEM_API const char* tandem_status_string(tandem_status status);  /* "ok", "invalid argument", ... */
TANDEM_API const char* tandem_finish_reason_string(int32_t reason);  /* "stop", "length", "cancelled" */

/* ---- parameters: fill with defaults; struct_size = sizeof(*params) ------------------- */
TANDEM_API tandem_status tandem_load_params_init(tandem_load_params* params, size_t struct_size);
TANDEM_API tandem_status tandem_generate_params_init(tandem_generate_params* params, size_t struct_size);

/* ---- engine ------------------------------------------------------------------------- */
TANDEM_API tandem_status tandem_engine_load(const tandem_load_params* params, tandem_engine** out_engine);
TANDEM_API void tandem_engine_free(tandem_engine* engine);
TANDEM_API tandem_status tandem_engine_info(const tandem_engine* engine, tandem_model_info* out_info);
/* Cancels every generation running or waiting on this engine when it is called (later ones
 * are unaffected); they return TANDEM_CANCELLED at their next token. A long prompt's
 * prefill is not interrupted. Safe from any thread, e.g. a signal-watching thread. */
TANDEM_API tandem_status tandem_engine_cancel(tandem_engine* engine);
/* Measures this engine's target and draft forward passes (a few seconds), or takes them from
 * the cost cache when it holds this engine's models, backend and threads, and installs the
 * cost model the "adaptive" and "goodput" policies use (what `tandem generate` does before
 * its first request). k_max: the longest draft to cover (0 → 8). cache_path: NULL → the
 * default ($TANDEM_CACHE, else $XDG_CACHE_HOME/tandem, else ~/.cache/tandem, +
 * /cost_models.json); "" → no cache. Waits for a running generation. *out_from_cache (may
 * be NULL) is set to 1 when the cache had it. */
TANDEM_API tandem_status tandem_engine_calibrate(tandem_engine* engine, int32_t k_max, const char* cache_path,
                                                 int32_t* out_from_cache);

/* ---- generation ---------------------------------------------------------------------
 * params NULL → defaults. callback may be NULL. out_result may be NULL when only the
 * stream is wanted; otherwise it receives a result (also on TANDEM_CANCELLED) to free with
 * tandem_result_free, or NULL on error. */
TANDEM_API tandem_status tandem_generate(tandem_engine* engine, const char* prompt,
                                         const tandem_generate_params* params, tandem_stream_fn callback,
                                         void* user_data, tandem_result** out_result);
TANDEM_API tandem_status tandem_generate_tokens(tandem_engine* engine, const int32_t* prompt, size_t n_prompt,
                                                const tandem_generate_params* params, tandem_stream_fn callback,
                                                void* user_data, tandem_result** out_result);
/* The same two with a stream callback that also receives each token's logprobs. */
TANDEM_API tandem_status tandem_generate_logprobs(tandem_engine* engine, const char* prompt,
                                                  const tandem_generate_params* params,
                                                  tandem_stream_logprobs_fn callback, void* user_data,
                                                  tandem_result** out_result);
TANDEM_API tandem_status tandem_generate_tokens_logprobs(tandem_engine* engine, const int32_t* prompt,
                                                         size_t n_prompt, const tandem_generate_params* params,
                                                         tandem_stream_logprobs_fn callback, void* user_data,
                                                         tandem_result** out_result);
TANDEM_API void tandem_result_free(tandem_result* result);

/* ---- tokenizer ----------------------------------------------------------------------
 * Both store the full size in *out_n / *out_len. If it does not fit (tokens: capacity
 * elements; text: capacity bytes including the NUL) they return TANDEM_ERR_BUFFER_TOO_SMALL
 * and write nothing: call again with a buffer that large (NULL with capacity 0 to query). */
TANDEM_API tandem_status tandem_tokenize(const tandem_engine* engine, const char* text, int add_special,
                                         int parse_special, int32_t* tokens, size_t capacity, size_t* out_n);
/* Raw bytes of the tokens' texts (a cut UTF-8 character stays cut); ids outside the
 * vocabulary are an error. */
TANDEM_API tandem_status tandem_detokenize(const tandem_engine* engine, const int32_t* tokens, size_t n_tokens,
                                           char* text, size_t capacity, size_t* out_len);
/* A fill-in-the-middle prompt for a code model (Qwen2.5-Coder, StarCoder, CodeLlama,
 * DeepSeek-Coder, ...): its prefix, suffix and middle markers around the text before the
 * insertion point (prefix) and the text after it (suffix), BOS first where the model adds
 * one; generate from the ids (tandem_generate_tokens) to get the text in between. Both texts
 * are plain text (control-token texts are not parsed). A model without FIM markers fails
 * with TANDEM_ERR_INVALID_ARGUMENT. Appended after 0.1.0. */
TANDEM_API tandem_status tandem_fim_tokenize(const tandem_engine* engine, const char* prefix, const char* suffix,
                                             int32_t* tokens, size_t capacity, size_t* out_n);

/* ---- constrained output --------------------------------------------------------------
 * The GBNF grammar (for tandem_generate_params.grammar) of the JSON documents valid against
 * a JSON Schema (schema_json, JSON text; "" → any JSON object). The buffer convention is
 * tandem_detokenize's. A schema using what a grammar cannot express (pattern, not, ...)
 * fails with TANDEM_ERR_INVALID_ARGUMENT naming the keyword and its place. Thread-safe. */
TANDEM_API tandem_status tandem_json_schema_to_grammar(const char* schema_json, char* grammar, size_t capacity,
                                                       size_t* out_len);

/* ---- chat ---------------------------------------------------------------------------
 * Conversations become prompts with the model's own chat template (GGUF key
 * tokenizer.chat_template; ChatML when the file has none), exactly as `tandem serve` and
 * `tandem chat` build them, ending with the assistant's turn (add_generation_prompt).
 * The template is parsed on the first call; a template the library cannot interpret makes
 * every chat call fail with TANDEM_ERR_LOAD (generation from text or tokens still works).
 * A conversation the template rejects (its raise_exception, e.g. roles that do not
 * alternate) fails with TANDEM_ERR_INVALID_ARGUMENT and the template's message.
 * Buffers follow the tokenizer's convention above. Safe from any thread. */
typedef struct tandem_chat_message {
  const char* role;     /* "system", "user", "assistant", ... */
  const char* content;
} tandem_chat_message;

/* The rendered prompt text (control-token texts as text). */
TANDEM_API tandem_status tandem_chat_render(const tandem_engine* engine, const tandem_chat_message* messages,
                                            size_t n_messages, char* text, size_t capacity, size_t* out_len);
/* The prompt's token ids, ready for tandem_generate_tokens with add_special = 0: control-token
 * texts become control tokens, and BOS is prepended only when the model wants one and the
 * template did not write it already. */
TANDEM_API tandem_status tandem_chat_tokenize(const tandem_engine* engine, const tandem_chat_message* messages,
                                              size_t n_messages, int32_t* tokens, size_t capacity, size_t* out_n);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_TANDEM_H */
