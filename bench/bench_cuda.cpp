// CUDA backend timings for the GPU run (bench/gpu_check.sh); runs on any backend the
// factory gives (cuda, cuda-emulated with tiny shapes, cpu), so it is built and smoke-run
// without a GPU too.
//
//   bench_cuda [--device cuda] [--gpu-mem 16G] [--ops] [--gemm] [--attention] [-m MODEL.gguf] [--ctx 256]
//              [--nmax 16] [--reps 5] [--small] [--gemm-min-tokens N] [--profile]
//
// Prints one JSON object:
//   backend, copy_gbps (device-to-device copy bandwidth: the reference),
//   ops: per weight type, matmul of an R x C weight at M = 1 (ms, weight GB/s, fraction of
//        copy_gbps) and T(M)/T(1) for M = 1..16 (the cost of verifying M-1 drafts);
//   gemm: per weight type, the matmul of an FFN-shaped weight (8960 x 1536) at M = 1..512
//        tokens: ms and tera-operations/s (2 R C M / time: int8 tensor cores for the quantized
//        types, TF32 ones for BF16, a Hugging Face checkpoint's type); with --gemm-min-tokens N the
//        dequantize + cuBLAS path takes M >= N (run it twice for the side-by-side ratio);
//   attention (--attention): paged attention at Qwen2.5-1.5B's heads (12 query / 2 KV of 128,
//        F16 cache in blocks of 16): a 512-token prompt chunk of one sequence (its tokens share
//        query tiles) against the same 512 tokens as 512 sequences over the same cached rows
//        (no tile can form: each token's K/V rows are read once per token), ms of each and
//        their ratio; and one decode token over 4096 positions: ms and K/V GB/s;
//   model (with -m): prefill tokens/s, kernel launches of the prefill pass (per layer), T(n)
//        ms for n = 1..nmax at position ctx, batch-1 decode tokens/s and its weight GB/s as
//        a fraction of copy_gbps.
//   profile (with -m and --profile; CUDA graphs off for the whole run, since a replayed graph
//        cannot be broken down): the stream's time by op (CudaBackend::profile_ops) over a
//        prefill of --ctx tokens, `reps` decode passes and `reps` verification passes of 5
//        tokens (k = 4), each a list of {op, count, ms, weight_bytes} (totals; a matmul's op names
//        its weights' type and shape), most time first.
// --small shrinks the op shapes (for the emulator).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/transformer.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/cpu/fp16.hpp"
#include "tests/support/random_blocks.hpp"

using Clock = std::chrono::steady_clock;
using namespace tandem;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_ms(kernels::Backend& be, int reps, F&& f) {
  f();
  be.synchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    be.synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median(t);
}

}  // namespace

static int run(int argc, char** argv) {
  std::string device = "cuda", model_path, gpu_mem = "0";
  int nmax = 16, reps = 5, ctx = 256;
  bool ops = false, small = false, gemm = false, attention = false, profile = false;
  int64_t gemm_min_tokens = 0;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (!std::strcmp(argv[i], "--device")) device = next();
    else if (!std::strcmp(argv[i], "--gpu-mem")) gpu_mem = next();
    else if (!std::strcmp(argv[i], "-m")) model_path = next();
    else if (!std::strcmp(argv[i], "--ops")) ops = true;
    else if (!std::strcmp(argv[i], "--small")) small = true;
    else if (!std::strcmp(argv[i], "--gemm")) gemm = true;
    else if (!std::strcmp(argv[i], "--attention")) attention = true;
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else if (!std::strcmp(argv[i], "--gemm-min-tokens")) gemm_min_tokens = std::stoll(next());
    else if (!std::strcmp(argv[i], "--nmax")) nmax = std::stoi(next());
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(next());
    else if (!std::strcmp(argv[i], "--ctx")) ctx = std::stoi(next());
    else {
      std::fprintf(stderr, "usage: %s [--device cuda] [--gpu-mem SIZE] [--ops] [--gemm] [--attention] [--small] [--gemm-min-tokens N] [-m MODEL.gguf] [--ctx N] [--nmax N] [--reps N] [--profile]\n", argv[0]);
      return 2;
    }
  }
  if (profile) ::setenv("TANDEM_CUDA_GRAPHS", "0", 1);  // (read when the Transformer is made)
  kernels::BackendOptions bo;
  bo.device = device;
  bo.gpu_mem_bytes = kernels::parse_memory_size(gpu_mem);
  bo.gemm_min_tokens = gemm_min_tokens;
  std::string why;
  auto be = kernels::make_backend(bo, &why);
  const bool is_cuda = be->kind() == kernels::DeviceKind::CUDA;
  const double copy = is_cuda ? kernels::cuda_copy_bandwidth_gbps(*be, small ? (size_t{8} << 20) : (size_t{1} << 30)) : 0;
  std::string out = "{\"backend\": \"" + be->name() + "\", \"copy_gbps\": " + std::to_string(copy);
  if (!why.empty()) out += ", \"fallback\": \"" + why + "\"";

  if (ops) {
    const int64_t R = small ? 64 : 4096, C = small ? 512 : 4096;
    out += ", \"ops\": {\"rows\": " + std::to_string(R) + ", \"cols\": " + std::to_string(C);
    const DType types[] = {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_0, DType::Q5_K, DType::F16, DType::BF16};
    std::vector<float> x(static_cast<size_t>(16 * C));
    std::mt19937 g(1);
    for (auto& v : x) v = std::normal_distribution<float>(0, 1)(g);
    auto xb = be->alloc(x.size() * 4);
    const kernels::Tensor xt = kernels::make_tensor(xb.get(), DType::F32, C, 16);
    be->upload(xt, x.data(), x.size() * 4);
    auto yb = be->alloc(sizeof(float) * 16 * static_cast<size_t>(R));
    // Each type as the engine loads it (the backend's own layout where it has one: Q4_0, Q5_0, Q8_0 and
    // Q6_K planes on CUDA), and such types again as stored ("<type> file"), side by side.
    std::vector<std::pair<DType, bool>> runs;
    for (DType t : types) {
      runs.push_back({t, true});
      if (be->packs_weights(t)) runs.push_back({t, false});
    }
    for (const auto& [t, pack] : runs) {
      const auto blob = test::random_blocks(t, R * C, 3);
      std::unique_ptr<kernels::Buffer> wb;
      const kernels::Tensor w = upload_matrix(*be, t, blob.data(), C, R, wb, pack);
      std::vector<double> tm;
      for (int m = 1; m <= 16; ++m) {
        const kernels::Tensor y = kernels::make_tensor(yb.get(), DType::F32, R, m);
        tm.push_back(time_ms(*be, reps, [&] { be->matmul(y, w, xt.slice_rows(0, m)); }));
      }
      const double gbps = static_cast<double>(blob.size()) / (tm[0] * 1e-3) / 1e9;
      out += std::string(", \"") + dtype_name(t) + (pack ? "" : " file") + "\": {\"m1_ms\": " + std::to_string(tm[0]) +
             ", \"weight_gbps\": " + std::to_string(gbps) +
             ", \"fraction_of_copy\": " + std::to_string(copy > 0 ? gbps / copy : 0) + ", \"t_rel\": [";
      for (size_t i = 0; i < tm.size(); ++i) out += (i ? ", " : "") + std::to_string(tm[i] / tm[0]);
      out += "]}";
    }
    out += "}";
  }

  if (gemm) {
    const int64_t R = small ? 64 : 8960, C = small ? 512 : 1536;
    const std::vector<int> ms = small ? std::vector<int>{1, 17, 40} : std::vector<int>{1, 8, 16, 17, 32, 64, 128, 256, 512};
    const int mmax = ms.back();
    out += ", \"gemm\": {\"rows\": " + std::to_string(R) + ", \"cols\": " + std::to_string(C) +
           ", \"gemm_min_tokens\": " + std::to_string(gemm_min_tokens) + ", \"m\": [";
    for (size_t i = 0; i < ms.size(); ++i) out += (i ? ", " : "") + std::to_string(ms[i]);
    out += "]";
    std::vector<float> x(static_cast<size_t>(mmax * C));
    std::mt19937 g(2);
    for (auto& v : x) v = std::normal_distribution<float>(0, 1)(g);
    auto xb = be->alloc(x.size() * 4);
    const kernels::Tensor xt = kernels::make_tensor(xb.get(), DType::F32, C, mmax);
    be->upload(xt, x.data(), x.size() * 4);
    auto yb = be->alloc(sizeof(float) * static_cast<size_t>(mmax * R));
    for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::BF16}) {
      const auto blob = test::random_blocks(t, R * C, 4);
      std::unique_ptr<kernels::Buffer> wb;
      const kernels::Tensor w = upload_matrix(*be, t, blob.data(), C, R, wb);  // as the engine loads it
      std::string ms_s, tops_s;
      for (size_t i = 0; i < ms.size(); ++i) {
        const kernels::Tensor y = kernels::make_tensor(yb.get(), DType::F32, R, ms[i]);
        const double t_ms = time_ms(*be, reps, [&] { be->matmul(y, w, xt.slice_rows(0, ms[i])); });
        ms_s += (i ? ", " : "") + std::to_string(t_ms);
        tops_s += (i ? ", " : "") + std::to_string(2.0 * double(R) * double(C) * ms[i] / (t_ms * 1e-3) / 1e12);
      }
      out += std::string(", \"") + dtype_name(t) + "\": {\"ms\": [" + ms_s + "], \"tops\": [" + tops_s + "]}";
    }
    out += "}";
  }

  if (attention) {
    const int nh = 12, nkv = 2, hd = 128, bs = 16;
    const int n = small ? 24 : 512, decode_ctx = small ? 64 : 4096;
    const int64_t slots = std::max(n, decode_ctx), width = int64_t{nkv} * hd;
    std::vector<uint16_t> kv(static_cast<size_t>(slots * width));
    std::mt19937 g(3);
    for (auto& v : kv) v = kernels::cpu::f32_to_fp16(std::normal_distribution<float>(0, 1)(g));
    auto kb = be->alloc(kv.size() * 2), vb = be->alloc(kv.size() * 2);
    const kernels::Tensor kt = kernels::make_tensor(kb.get(), DType::F16, width, slots);
    const kernels::Tensor vt = kernels::make_tensor(vb.get(), DType::F16, width, slots);
    be->upload(kt, kv.data(), kv.size() * 2);
    be->upload(vt, kv.data(), kv.size() * 2);
    std::vector<float> q(static_cast<size_t>(n) * nh * hd);
    for (auto& v : q) v = std::normal_distribution<float>(0, 1)(g);
    auto qb = be->alloc(q.size() * 4), ob = be->alloc(q.size() * 4);
    const kernels::Tensor qt = kernels::make_tensor(qb.get(), DType::F32, int64_t{nh} * hd, n);
    const kernels::Tensor ot = kernels::make_tensor(ob.get(), DType::F32, int64_t{nh} * hd, n);
    be->upload(qt, q.data(), q.size() * 4);
    std::vector<std::unique_ptr<kernels::Buffer>> keep;
    auto i32 = [&](const std::vector<int32_t>& v, int64_t cols) {
      keep.push_back(be->alloc(v.size() * 4));
      const kernels::Tensor t = kernels::make_tensor(keep.back().get(), DType::I32, cols, static_cast<int64_t>(v.size()) / cols);
      be->upload(t, v.data(), v.size() * 4);
      return t;
    };
    // Sequences whose block tables all point at the same blocks 0, 1, ...: the same cached rows.
    auto call = [&](int tokens, int n_seqs, const std::vector<int32_t>& pos, const std::vector<int32_t>& seq) {
      const int64_t cols = (slots + bs - 1) / bs;
      std::vector<int32_t> table(static_cast<size_t>(n_seqs * cols));
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i % static_cast<size_t>(cols));
      kernels::PagedAttnMeta meta;
      meta.positions = i32(pos, tokens);
      meta.seq_index = i32(seq, tokens);
      meta.block_table = i32(table, cols);
      meta.block_size = bs;
      const kernels::Tensor o = ot.slice_rows(0, tokens), qq = qt.slice_rows(0, tokens);
      return time_ms(*be, reps, [&] {
        be->paged_attention(o, qq, kernels::KVLayer{kt, vt}, meta, nh, nkv, hd, 1.0f / std::sqrt(float(hd)));
      });
    };
    std::vector<int32_t> pos(static_cast<size_t>(n)), one(static_cast<size_t>(n), 0), each(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    std::iota(each.begin(), each.end(), 0);
    const double tiled = call(n, 1, pos, one), untiled = call(n, n, pos, each);
    const double decode = call(1, 1, {decode_ctx - 1}, {0});
    const double kv_gb = 2.0 * decode_ctx * static_cast<double>(width) * 2 / 1e9;
    out += ", \"attention\": {\"prefill_tokens\": " + std::to_string(n) + ", \"one_sequence_ms\": " +
           std::to_string(tiled) + ", \"separate_sequences_ms\": " + std::to_string(untiled) +
           ", \"query_tile_gain\": " + std::to_string(untiled / tiled) + ", \"decode_context\": " +
           std::to_string(decode_ctx) + ", \"decode_ms\": " + std::to_string(decode) +
           ", \"decode_kv_gbps\": " + std::to_string(kv_gb / (decode * 1e-3)) + "}";
  }

  if (!model_path.empty()) {
    auto model = Model::load(model_path, *be);
    KVCacheOptions o;
    o.max_tokens = ctx + nmax + 16;
    KVCache cache(*be, model->config(), o);
    Transformer tf(*model, cache);
    SequenceKV seq(cache);
    const int32_t vocab = model->config().n_vocab;
    std::vector<int32_t> prompt(static_cast<size_t>(ctx));
    for (int i = 0; i < ctx; ++i) prompt[static_cast<size_t>(i)] = (i * 7919 + 13) % std::min(vocab, 30000);
    std::vector<float> logits;
    const int64_t launches0 = kernels::cuda_launch_count(*be);
    const auto tp = Clock::now();
    {
      Batch b;
      b.add(seq, prompt);
      tf.forward(b, logits);
    }
    const double prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - tp).count();
    const int64_t prefill_launches = launches0 < 0 ? -1 : kernels::cuda_launch_count(*be) - launches0;
    // The n tokens a decode (n = 1) or verification pass feeds after the prompt.
    const auto pass_tokens = [&](int n) {
      std::vector<int32_t> run(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) run[static_cast<size_t>(i)] = (ctx + 31 * i) % std::min(vocab, 30000);
      return run;
    };
    std::vector<double> tn;
    for (int n = 1; n <= nmax; ++n) {
      const std::vector<int32_t> run = pass_tokens(n);
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        Batch b;
        b.add_all_logits(seq, run);
        const auto t0 = Clock::now();
        tf.forward(b, logits);
        t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        seq.truncate(ctx);
      }
      tn.push_back(median(t));
    }
    const double gbps = static_cast<double>(model->weight_bytes()) / (tn[0] * 1e-3) / 1e9;
    out += ", \"model\": {\"path\": \"" + model_path + "\", \"weight_bytes\": " + std::to_string(model->weight_bytes()) +
           ", \"prefill_tok_s\": " + std::to_string(ctx * 1000.0 / prefill_ms) +
           ", \"prefill_launches\": " + std::to_string(prefill_launches) + ", \"launches_per_layer\": " +
           std::to_string(prefill_launches < 0 ? -1.0 : double(prefill_launches) / model->config().n_layer) +
           ", \"decode_tok_s\": " + std::to_string(1000.0 / tn[0]) + ", \"weight_gbps\": " + std::to_string(gbps) +
           ", \"fraction_of_copy\": " + std::to_string(copy > 0 ? gbps / copy : 0) + ", \"t_ms\": [";
    for (size_t i = 0; i < tn.size(); ++i) out += (i ? ", " : "") + std::to_string(tn[i]);
    out += "]}";
    if (profile && kernels::cuda_profile_ops(*be, true)) {
      const auto list = [](const std::vector<kernels::OpTime>& p) {
        std::string s = "[";
        for (size_t i = 0; i < p.size(); ++i)
          s += std::string(i ? ", " : "") + "{\"op\": \"" + p[i].op + "\", \"count\": " + std::to_string(p[i].count) +
               ", \"ms\": " + std::to_string(p[i].ms) + ", \"weight_bytes\": " + std::to_string(p[i].weight_bytes) + "}";
        return s + "]";
      };
      seq.truncate(0);
      kernels::cuda_op_profile(*be);  // (what the truncation did)
      {
        Batch b;
        b.add(seq, prompt);
        tf.forward(b, logits);
      }
      const std::string prefill = list(kernels::cuda_op_profile(*be));
      const auto passes = [&](int n) {
        const std::vector<int32_t> run = pass_tokens(n);
        kernels::cuda_op_profile(*be);
        for (int r = 0; r < reps; ++r) {
          Batch b;
          b.add_all_logits(seq, run);
          tf.forward(b, logits);
          seq.truncate(ctx);
        }
        return list(kernels::cuda_op_profile(*be));
      };
      const std::string decode = passes(1), verify = passes(5);
      out += ", \"profile\": {\"prefill_tokens\": " + std::to_string(ctx) + ", \"prefill\": " + prefill +
             ", \"passes\": " + std::to_string(reps) + ", \"decode\": " + decode + ", \"verify_tokens\": 5, \"verify\": " +
             verify + "}";
      kernels::cuda_profile_ops(*be, false);
    }
  }
  out += "}";
  std::printf("%s\n", out.c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (auto& ch : msg)
      if (ch == '"' || ch == '\\' || ch == '\n') ch = ' ';
    std::printf("{\"error\": \"%s\"}\n", msg.c_str());
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
}
