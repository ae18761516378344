/* tandem C API example: load a model, stream a greedy generation with n-gram speculative
 * decoding, print the metrics.
 *
 *   tandem_example_c MODEL.gguf [PROMPT] [N_TOKENS]
 *
 * Build against an installed tandem, with CMake (see CMakeLists.txt here):
 *   cmake -S . -B build -DCMAKE_PREFIX_PATH=/path/to/prefix && cmake --build build
 * or with pkg-config:
 *   cc main.c $(pkg-config --cflags --libs tandem) -o tandem_example_c
 *   (PKG_CONFIG_PATH=/path/to/prefix/lib/pkgconfig when not installed in a system prefix;
 *   LD_LIBRARY_PATH=/path/to/prefix/lib to run it then.)
 *
 * stdout gets the text and the deterministic counts; timings go to stderr. */
#include <stdio.h>
#include <stdlib.h>

#include <tandem/tandem.h>

static int on_piece(const char* text, size_t len, int32_t token, void* user_data) {
  (void)token;
  (void)user_data;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0; /* non-zero would cancel */
}

static int fail(const char* what, tandem_status status) {
  fprintf(stderr, "%s: %s: %s\n", what, tandem_status_string(status), tandem_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [N_TOKENS]\n", argv[0]);
    return 2;
  }
  const char* prompt = argc > 2 ? argv[2] : "Hello";
  const int n_tokens = argc > 3 ? atoi(argv[3]) : 16;
  fprintf(stderr, "tandem %s (header %s)\n", tandem_version(), TANDEM_VERSION_STRING);

  tandem_load_params lp;
  tandem_load_params_init(&lp, sizeof lp);
  lp.model_path = argv[1];
  tandem_engine* engine = NULL;
  tandem_status st = tandem_engine_load(&lp, &engine);
  if (st != TANDEM_OK) return fail("load", st);

  tandem_model_info info;
  info.struct_size = sizeof info;
  if (tandem_engine_info(engine, &info) == TANDEM_OK)
    fprintf(stderr, "model: %s (%s, %d layers, vocab %d), %s\n", info.name, info.architecture, info.n_layer,
            info.n_vocab, info.backend);

  tandem_generate_params gp;
  tandem_generate_params_init(&gp, sizeof gp);
  gp.max_tokens = n_tokens;
  gp.temperature = 0.0f; /* greedy: reproducible */
  gp.ignore_eos = 1;
  gp.draft_mode = TANDEM_DRAFT_NGRAM;
  gp.draft_max = 4;

  fputs(prompt, stdout);
  tandem_result* r = NULL;
  st = tandem_generate(engine, prompt, &gp, on_piece, NULL, &r);
  if (st < 0) {
    tandem_engine_free(engine);
    return fail("generate", st);
  }
  printf("\nfinish: %s, %zu tokens\n", tandem_finish_reason_string(r->finish_reason), r->n_tokens);
  printf("speculative: ngram k=%d, %lld drafts, %lld drafted, %lld accepted (acceptance %.3f)\n", gp.draft_max,
         (long long)r->spec_drafts, (long long)r->spec_drafted_tokens, (long long)r->spec_accepted_tokens,
         r->spec_acceptance_rate);
  fprintf(stderr, "prefill %.1f tok/s, decode %.1f tok/s\n", r->prefill_tokens_per_s, r->decode_tokens_per_s);

  tandem_result_free(r);
  tandem_engine_free(engine);
  return 0;
}
