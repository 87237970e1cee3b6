// Peer reference harness: llama.cpp's logits for a synthetic model, the way the fixtures'
// references were made (../shared/fixtures/README.md "How the references were made"): CPU, 2
// threads, n_ctx = n_batch = n_ubatch = 512, K and V cache in F32, flash attention off.
//
//   llama_logits MODEL.gguf TEXT N_POS N_GEN OUT.logits.bin [N_CTX]
//
// N_CTX (default 512) sets n_ctx, n_batch and n_ubatch: the context size picks LongRoPE's factor
// set (phimoe), so a second reference at a smaller context checks the other set.
// Tokenizes TEXT (add_special, no parse_special), keeps the first N_POS ids, teacher-forces them
// as one batch and writes every position's logits as MOEL (docs/FORMATS.md); then greedy-decodes
// N_GEN tokens and prints them as "gen ID ..." on stdout. Not part of the strata build: compile it
// against a llama.cpp build (scripts/peer/synth_refs.sh shows how).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

void put_u32(FILE* f, uint32_t v) {
  std::fwrite(&v, 4, 1, f);
}

// Flash attention off, in either API: a bool flash_attn (llama.cpp to mid 2025), or the
// flash_attn_type enum whose 0 is LLAMA_FLASH_ATTN_TYPE_DISABLED (later).
template <class P>
auto no_flash_attn(P& p, int) -> decltype(p.flash_attn_type, void()) {
  p.flash_attn_type = decltype(p.flash_attn_type)(0);
}
template <class P>
void no_flash_attn(P& p, long) {
  p.flash_attn = false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr,
                 "usage: llama_logits MODEL.gguf TEXT N_POS N_GEN OUT.logits.bin [N_CTX]\n");
    return 2;
  }
  const int n_ctx = argc == 7 ? std::atoi(argv[6]) : 512;
  const std::string text = argv[2];
  const int n_pos_max = std::atoi(argv[3]);
  const int n_gen = std::atoi(argv[4]);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) {
    std::fprintf(stderr, "llama_logits: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = uint32_t(n_ctx);
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  no_flash_attn(cp, 0);
  llama_context* ctx = llama_init_from_model(model, cp);

  std::vector<llama_token> ids(text.size() + 8);
  const int n_tok = llama_tokenize(vocab, text.data(), int(text.size()), ids.data(),
                                   int(ids.size()), true, false);
  if (n_tok <= 0 || n_tok < n_pos_max || n_pos_max + n_gen > n_ctx) {
    std::fprintf(stderr, "llama_logits: the text gives %d tokens, need %d (+%d <= %d)\n", n_tok,
                 n_pos_max, n_gen, n_ctx);
    return 1;
  }
  const int n = n_pos_max;
  ids.resize(n);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  // SEQUENTIAL=1: one llama_decode per position (decode's path) instead of one batch. Batched
  // F32 matmuls (the router) round differently from single-token ones in llama.cpp, so the two
  // references can differ by a rounding flip of an activation's quantization.
  const bool sequential = std::getenv("SEQUENTIAL") && std::atoi(std::getenv("SEQUENTIAL")) != 0;
  std::vector<float> logits(size_t(n) * size_t(n_vocab));
  llama_batch b = llama_batch_init(n_ctx, 0, 1);
  const auto put = [&b](int slot, llama_token id, int pos) {
    b.token[slot] = id;
    b.pos[slot] = pos;
    b.n_seq_id[slot] = 1;
    b.seq_id[slot][0] = 0;
    b.logits[slot] = 1;
  };
  if (sequential) {
    for (int i = 0; i < n; ++i) {
      put(0, ids[i], i);
      b.n_tokens = 1;
      if (llama_decode(ctx, b) != 0) return 1;
      std::copy_n(llama_get_logits_ith(ctx, 0), n_vocab, logits.begin() + size_t(i) * n_vocab);
    }
  } else {
    for (int i = 0; i < n; ++i) put(i, ids[i], i);
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) return 1;
    for (int i = 0; i < n; ++i)
      std::copy_n(llama_get_logits_ith(ctx, i), n_vocab, logits.begin() + size_t(i) * n_vocab);
  }

  FILE* f = std::fopen(argv[5], "wb");
  if (!f) return 1;
  put_u32(f, 0x4C454F4D);  // "MOEL"
  put_u32(f, 1);
  put_u32(f, uint32_t(n));
  put_u32(f, uint32_t(n_vocab));
  std::fwrite(ids.data(), 4, size_t(n), f);
  std::fwrite(logits.data(), 4, logits.size(), f);
  if (std::fclose(f) != 0) return 1;

  std::printf("ids");
  for (int i = 0; i < n; ++i) std::printf(" %d", ids[i]);
  std::printf("\ngen");
  llama_token next = argmax(logits.data() + size_t(n - 1) * n_vocab, n_vocab);
  for (int g = 0; g < n_gen; ++g) {
    std::printf(" %d", next);
    put(0, next, n + g);
    b.n_tokens = 1;
    if (llama_decode(ctx, b) != 0) return 1;
    next = argmax(llama_get_logits_ith(ctx, 0), n_vocab);
  }
  std::printf("\n");
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
