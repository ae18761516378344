// The packed row layout of the 32-element block types (kernels/cpu/pack_q32.hpp) and the
// 16-row tiles of those and of Q4_K and Q6_K (kernels/cpu/pack_tiles.hpp): packing
// round-trips, every field is where the layout says, a packed matrix multiplies to the very
// bits of the file's layout at every level, a tiled one gives each row the same bits however
// the rows are split, and the backend and the model pack exactly the matrices matmul reads.
// (Tiled products against the reference and batch invariance: test_quant.cpp.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/model/output_subset.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_q32.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "tests/support/isa_levels.hpp"
#include "tests/support/random_blocks.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

namespace cpu = kernels::cpu;
using cpu::Isa;
using test::IsaGuard;
using test::supported_isas;

const DType kQ32[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};
const DType kTiled[] = {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> random_x(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(s >> 33) % 2001 - 1000) / 500.0f;
  }
  return x;
}

// Whether the CPU backend should pack the 32-element types here: any level with SIMD
// kernels (AVX2 and AVX-512 both have packed ones), unless TANDEM_PACK=0.
bool packing_expected() {
  const char* v = std::getenv("TANDEM_PACK");
  return cpu::active_isa() != Isa::Scalar && !(v && std::string(v) == "0");
}
// 16-row tiles, preferred to packed rows where a level has kernels for them: AVX-512 for
// every tiled type, AVX2 for Q4_0, Q4_1 and Q4_K (matmul_*_tiles_avx2.cpp say why).
bool tiling_expected(DType t) {
  if (!packing_expected() || !cpu::mm::has_tiles(t)) return false;
  return cpu::active_isa() == Isa::Avx512 ||
         (cpu::active_isa() == Isa::Avx2 && (t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q4_K));
}

std::vector<uint8_t> packed_copy(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> p(w.size());
  cpu::ThreadPool pool(2);
  cpu::pack_rows(pool, t, w.data(), row_bytes(t, cols), p.data(), rows, cols);
  return p;
}
std::vector<uint8_t> tiled_copy(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> p(w.size());
  cpu::ThreadPool pool(2);
  cpu::tile_rows(pool, t, w.data(), row_bytes(t, cols), p.data(), rows, cols);
  return p;
}

TEST(PackedRows, RoundTripAndFieldArrays) {
  for (DType t : kQ32)
    for (int64_t nb : {1, 2, 3, 11, 28, 29}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " nb=" + std::to_string(nb));
      const int64_t cols = 32 * nb;
      const std::vector<uint8_t> w = test::random_blocks(t, cols, 7 + static_cast<uint64_t>(nb));
      std::vector<uint8_t> p(w.size()), back(w.size());
      cpu::mm::pack_q32_row(t, w.data(), p.data(), cols);
      cpu::mm::unpack_q32_row(t, p.data(), back.data(), cols);
      EXPECT_EQ(back, w);
      // The scales are one array at the row's start: block b's f16 d at 2b.
      const size_t bytes = row_bytes(t, 32);
      for (int64_t b = 0; b < nb; ++b)
        ASSERT_EQ(cpu::blk::u16_at(&p[2 * static_cast<size_t>(b)]), cpu::blk::u16_at(&w[bytes * static_cast<size_t>(b)]));
      // The codes: each block's qs bytes as stored, one block after another.
      const cpu::mm::PackedQ32 layout = cpu::mm::packed_q32(t, nb);
      const size_t qs_file = bytes - static_cast<size_t>(layout.code_bytes);  // qs ends every block
      for (int64_t b = 0; b < nb; ++b)
        ASSERT_EQ(0, std::memcmp(&p[layout.codes + static_cast<size_t>(layout.code_bytes * b)],
                                 &w[bytes * static_cast<size_t>(b) + qs_file], static_cast<size_t>(layout.code_bytes)));
      if (t == DType::Q5_0 || t == DType::Q5_1) {  // the fifth bits: per pair, 16-bit parts A lo, B lo, A hi, B hi
        const size_t qh_file = t == DType::Q5_0 ? cpu::blk::q5_0::qh : cpu::blk::q5_1::qh;
        auto file_qh = [&](int64_t b) { return uint64_t{cpu::blk::u32_at(&w[bytes * static_cast<size_t>(b) + qh_file])}; };
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
          uint64_t word;
          std::memcpy(&word, &p[layout.qh + 4 * static_cast<size_t>(b)], 8);
          const uint64_t qa = file_qh(b), qb = file_qh(b + 1);
          ASSERT_EQ(word, (qa & 0xffff) | (qb & 0xffff) << 16 | (qa >> 16) << 32 | (qb >> 16) << 48) << "pair " << b;
        }
        if (b < nb) {
          ASSERT_EQ(cpu::blk::u32_at(&p[layout.qh + 4 * static_cast<size_t>(b)]), file_qh(b));
        }
      }
    }
  std::vector<uint8_t> buf(1024);
  EXPECT_THROW(cpu::mm::pack_q32_row(DType::Q4_K, buf.data(), buf.data() + 512, 256), std::invalid_argument);
  EXPECT_THROW(cpu::mm::pack_q32_row(DType::Q4_0, buf.data(), buf.data() + 512, 48), std::invalid_argument);
}

// The packed kernel of a level does the arithmetic of that level's file-layout kernel in
// the same order, so the bits must match; a level without a packed kernel of its own
// multiplies packed rows through the scalar kernel (each row unpacked), whose bits those are.
TEST(PackedRows, MatmulGivesTheBitsOfTheFileLayout) {
  IsaGuard guard;
  cpu::ThreadPool pool1(1), pool2(2);
  for (DType t : kQ32)
    for (int64_t nb : {1, 2, 3, 11, 16, 17, 28, 33})
      for (int64_t R : {1, 5, 37}) {
        const int64_t C = 32 * nb;
        const std::vector<uint8_t> w = test::random_blocks(t, R * C, 100 * static_cast<uint64_t>(nb) + static_cast<uint64_t>(R));
        const std::vector<uint8_t> p = packed_copy(t, w, R, C);
        const size_t rb = row_bytes(t, C);
        for (int64_t N : {1, 2, 3, 4, 5, 9}) {
          const std::vector<float> x = random_x(N * C, static_cast<uint64_t>(N * 31 + nb));
          for (Isa isa : supported_isas()) {
            cpu::force_isa(isa);
            const bool native = isa != Isa::Scalar;  // AVX2 and AVX-512 have packed kernels (whatever TANDEM_PACK says)
            SCOPED_TRACE(std::string(dtype_name(t)) + " " + cpu::isa_name(isa) + (native ? " (packed kernel)" : "") +
                         " R=" + std::to_string(R) + " C=" + std::to_string(C) + " N=" + std::to_string(N));
            std::vector<float> want(static_cast<size_t>(R * N)), got(want.size(), 99.0f), got1(want.size(), 99.0f);
            if (!native) cpu::force_isa(Isa::Scalar);
            cpu::matmul(pool2, t, w.data(), rb, R, C, x.data(), C, N, want.data(), R);
            cpu::force_isa(isa);
            const cpu::MatmulJob job{t, p.data(), rb, R, got.data(), R, true};
            cpu::matmul_multi(pool2, &job, 1, C, x.data(), C, N);
            const cpu::MatmulJob job1{t, p.data(), rb, R, got1.data(), R, true};
            cpu::matmul_multi(pool1, &job1, 1, C, x.data(), C, N);
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_EQ(bits(got[i]), bits(want[i])) << "element " << i << ": " << got[i] << " vs " << want[i];
              ASSERT_EQ(bits(got1[i]), bits(want[i])) << "element " << i << " (one thread)";
            }
          }
        }
      }
}

// Packed and file-layout matrices in one shared call (q/k/v of a layer whose types differ).
TEST(PackedRows, SharedCallMixesLayouts) {
  IsaGuard guard;
  cpu::ThreadPool pool(2);
  const int64_t C = 896, N = 3;  // Qwen2.5 0.5B's width: 28 blocks
  const DType types[] = {DType::Q5_0, DType::Q8_0, DType::Q5_0, DType::Q4_0};
  const bool packed[] = {true, true, false, true};
  const int64_t rows[] = {40, 17, 40, 9};
  const std::vector<float> x = random_x(N * C, 5);
  std::vector<cpu::MatmulJob> jobs;
  std::vector<std::vector<uint8_t>> w(4);
  std::vector<std::vector<float>> together(4), alone(4);
  for (int j = 0; j < 4; ++j) {
    w[j] = test::random_blocks(types[j], rows[j] * C, 900 + static_cast<uint64_t>(j));
    if (packed[j]) w[j] = packed_copy(types[j], w[j], rows[j], C);
    together[j].assign(static_cast<size_t>(rows[j] * N), 1.0f);
    alone[j].assign(together[j].size(), 2.0f);
    jobs.push_back({types[j], w[j].data(), row_bytes(types[j], C), rows[j], together[j].data(), rows[j], packed[j]});
  }
  for (Isa isa : supported_isas()) {
    cpu::force_isa(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::matmul_multi(pool, jobs.data(), 4, C, x.data(), C, N);
    for (int j = 0; j < 4; ++j) {
      cpu::MatmulJob one = jobs[static_cast<size_t>(j)];
      one.y = alone[j].data();
      cpu::matmul_multi(pool, &one, 1, C, x.data(), C, N);
      for (size_t i = 0; i < alone[j].size(); ++i) ASSERT_EQ(bits(together[j][i]), bits(alone[j][i])) << "matrix " << j;
    }
  }
}

TEST(PackedRows, BackendPacksWhereItHasAKernel) {
  auto be = kernels::make_cpu_backend(2);
  for (DType t : {DType::Q5_K, DType::Q2_K, DType::F16}) EXPECT_FALSE(be->packs_weights(t)) << dtype_name(t);
  const int64_t R = 21, C = 96;
  const std::vector<uint8_t> w = test::random_blocks(DType::Q5_0, R * C, 3);
  EXPECT_EQ(be->pack_weight(DType::Q5_K, w.data(), 1, 256), nullptr);
  for (DType t : kQ32) EXPECT_EQ(be->packs_weights(t), packing_expected()) << dtype_name(t);
  for (DType t : kTiled) {
    EXPECT_EQ(be->packs_weights(t), tiling_expected(t) || (packing_expected() && cpu::mm::q32_packs(t))) << dtype_name(t);
    if (be->packs_weights(t)) {
      EXPECT_EQ(be->packed_layout(t), tiling_expected(t) ? kernels::RowLayout::Tiled : kernels::RowLayout::Packed);
    }
  }
  std::unique_ptr<kernels::Buffer> pbuf;
  const kernels::Tensor pw = upload_matrix(*be, DType::Q5_0, w.data(), C, R, pbuf);
  EXPECT_EQ(pw.layout != kernels::RowLayout::File, be->packs_weights(DType::Q5_0));
  if (be->packs_weights(DType::Q5_0)) {
    EXPECT_EQ(pw.layout, be->packed_layout(DType::Q5_0));
  }
  std::unique_ptr<kernels::Buffer> fbuf = be->alloc(w.size());
  const kernels::Tensor fw = kernels::make_tensor(fbuf.get(), DType::Q5_0, C, R);
  be->upload(fw, w.data(), w.size());

  const int64_t N = 3;
  const std::vector<float> xs = random_x(N * C, 11);
  auto xb = be->alloc(xs.size() * 4), yb1 = be->alloc(static_cast<size_t>(N * R) * 4), yb2 = be->alloc(static_cast<size_t>(N * R) * 4);
  const kernels::Tensor x = kernels::make_tensor(xb.get(), DType::F32, C, N);
  const kernels::Tensor y1 = kernels::make_tensor(yb1.get(), DType::F32, R, N), y2 = kernels::make_tensor(yb2.get(), DType::F32, R, N);
  be->upload(x, xs.data(), xs.size() * 4);
  be->matmul(y1, pw, x);
  be->matmul(y2, fw, x);
  std::vector<float> a(static_cast<size_t>(N * R)), b(a.size());
  be->download(a.data(), y1, a.size() * 4);
  be->download(b.data(), y2, b.size() * 4);
  if (pw.layout == kernels::RowLayout::Tiled) {
    // Tiles have kernels of their own (not the file's bits): the backend's product is the
    // driver's for that layout, and rows 16-20 (after the whole group) the file's.
    const std::vector<uint8_t> tw = tiled_copy(DType::Q5_0, w, R, C);
    std::vector<float> want(a.size());
    cpu::ThreadPool pool(2);
    const cpu::MatmulJob job{DType::Q5_0, tw.data(), row_bytes(DType::Q5_0, C), R, want.data(), R, false, true};
    cpu::matmul_multi(pool, &job, 1, C, xs.data(), C, N);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits(a[i]), bits(want[i])) << i;
    for (int64_t t = 0; t < N; ++t)
      for (int64_t r = 16; r < R; ++r) ASSERT_EQ(bits(a[t * R + r]), bits(b[t * R + r])) << "token " << t << " row " << r;
  } else {
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits(a[i]), bits(b[i])) << i;
  }

  if (pw.layout != kernels::RowLayout::File) {  // only matmul reads a packed weight
    auto ib = be->alloc(4);
    const kernels::Tensor ids = kernels::make_tensor(ib.get(), DType::I32, 1);
    const int32_t id = 0;
    be->upload(ids, &id, 4);
    auto ob = be->alloc(static_cast<size_t>(C) * 4);
    EXPECT_THROW(be->get_rows(kernels::make_tensor(ob.get(), DType::F32, C, 1), pw, ids), std::logic_error);
  }
}

// A model's matrices are packed, its embedding table is not; a tied head gets its own
// packed copy only when asked for, and a reduced-vocabulary head is packed too.
TEST(PackedRows, ModelPacksItsMatricesNotTheEmbeddings) {
  const std::string dir = ::testing::TempDir() + "packed_rows";
  std::filesystem::create_directories(dir);
  for (DType wt : {DType::Q5_0, DType::Q4_K})
  for (bool tied : {true, false}) {
    test::TinyModelSpec spec;
    spec.arch = "qwen2";
    spec.weight_type = wt;
    spec.embd_type = wt == DType::Q4_K ? DType::Q6_K : DType::Q8_0;
    if (wt == DType::Q4_K) spec.n_embd = 256, spec.n_ff = 512;  // whole 256-element blocks
    spec.tied_embeddings = tied;
    const std::string path = dir + "/" + dtype_name(wt) + (tied ? "-tied.gguf" : "-untied.gguf");
    test::write_tiny_model(path, spec);
    auto be = kernels::make_cpu_backend(2);
    const bool packs = be->packs_weights(wt);
    EXPECT_EQ(packs, wt == DType::Q4_K ? tiling_expected(wt) : packing_expected());
    auto m = Model::load(path, *be);
    SCOPED_TRACE(std::string(dtype_name(wt)) + (tied ? " tied" : " untied") +
                 (packs ? ", packing" : ", this CPU level has no packed kernel"));
    const auto want = packs ? be->packed_layout(wt) : kernels::RowLayout::File;
    for (const LayerWeights& L : m->layers)
      for (const kernels::Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
        EXPECT_EQ(w->layout, want);
    EXPECT_EQ(m->tok_embd.layout, kernels::RowLayout::File);
    const kernels::Tensor& head = m->head();
    const bool head_packs = be->packs_weights(head.type);
    EXPECT_EQ(head.layout, head_packs ? be->packed_layout(head.type) : kernels::RowLayout::File);
    EXPECT_EQ(&m->head(), &head);  // made once
    if (tied) {
      EXPECT_EQ(head.buf != m->tok_embd.buf, head_packs);
    }
    const auto subset = make_output_subset(*m, {1, 5, 9, 200});
    EXPECT_EQ(subset->head.layout, head_packs ? be->packed_layout(head.type) : kernels::RowLayout::File);
  }
}


// Tiles (pack_tiles.hpp): whole groups of 16 rows become tiles, the rest stays as stored,
// and unpacking gives every row back.
TEST(TiledRows, RoundTripAndTileFields) {
  cpu::ThreadPool pool(2);
  for (DType t : kTiled)
    for (int64_t R : {16, 21, 48, 7})
      for (int64_t nb : {1, 3}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " R=" + std::to_string(R) + " nb=" + std::to_string(nb));
        const int64_t C = 256 * nb;
        const int64_t be = dtype_info(t).block_size;  // elements a block
        const size_t rb = row_bytes(t, C), bb = row_bytes(t, be);
        const std::vector<uint8_t> w = test::random_blocks(t, R * C, 40 + static_cast<uint64_t>(R * nb));
        const std::vector<uint8_t> p = tiled_copy(t, w, R, C);
        const int64_t full = cpu::mm::tiled_rows(R);
        std::vector<uint8_t> back(rb);
        for (int64_t r = 0; r < R; ++r) {
          const uint8_t* want = &w[rb * static_cast<size_t>(r)];
          if (r < full) {
            const int64_t g = r / 16 * 16;
            cpu::mm::untile_row(t, &p[rb * static_cast<size_t>(g)], static_cast<int>(r - g), back.data(), C);
            ASSERT_EQ(0, std::memcmp(back.data(), want, rb)) << "row " << r;
          } else {
            ASSERT_EQ(0, std::memcmp(&p[rb * static_cast<size_t>(r)], want, rb)) << "tail row " << r << " moved";
          }
        }
        // Fields: row r's block b keeps its f16 d at 2r of tile b, and (Q4_K) its 12 scale
        // bytes 16 apart; the first 4 codes of element group 0 in the 4 bytes at 4r.
        for (int64_t g = 0; g < full; g += 16)
          for (int64_t b = 0; b < C / be; ++b) {
            const uint8_t* tile = &p[rb * static_cast<size_t>(g) + 16 * bb * static_cast<size_t>(b)];
            for (int r = 0; r < 16; ++r) {
              const uint8_t* blk = &w[rb * static_cast<size_t>(g + r) + bb * static_cast<size_t>(b)];
              std::vector<float> deq(static_cast<size_t>(be));
              cpu::dequantize_row_ref(t, blk, deq.data(), be);
              if (be == 32) {
                // d (and m) per row; the qs bytes 4 a row per vector; fifth bits as masks.
                const cpu::mm::Q32Tile q = cpu::mm::q32_tile(t);
                ASSERT_EQ(q.size, 16 * static_cast<int>(bb));
                ASSERT_EQ(cpu::blk::u16_at(tile + q.d + 2 * r), cpu::blk::u16_at(blk));  // d leads every 32-block
                if (q.m >= 0) {
                  ASSERT_EQ(cpu::blk::u16_at(tile + q.m + 2 * r), cpu::blk::u16_at(blk + 2));
                }
                const int vectors = t == DType::Q8_0 ? 8 : 4;
                const size_t qs = bb - static_cast<size_t>(vectors * 4);  // qs ends every block
                for (int v = 0; v < vectors; ++v)
                  ASSERT_EQ(0, std::memcmp(tile + q.codes + 64 * v + 4 * r, blk + qs + 4 * v, 4));
                if (q.qh >= 0) {
                  const uint32_t qh = cpu::blk::u32_at(blk + (t == DType::Q5_0 ? cpu::blk::q5_0::qh : cpu::blk::q5_1::qh));
                  for (int e = 0; e < 32; ++e) {
                    uint64_t mask;
                    std::memcpy(&mask, tile + q.qh + 8 * (e / 4), 8);
                    ASSERT_EQ((mask >> (4 * r + e % 4)) & 1, (qh >> e) & 1) << "fifth bit of element " << e;
                  }
                }
              } else if (t == DType::Q4_K) {
                ASSERT_EQ(cpu::blk::u16_at(tile + cpu::mm::tile_q4k::d + 2 * r), cpu::blk::u16_at(blk + cpu::blk::q4_k::d));
                ASSERT_EQ(cpu::blk::u16_at(tile + cpu::mm::tile_q4k::dmin + 2 * r), cpu::blk::u16_at(blk + cpu::blk::q4_k::dmin));
                for (int k = 0; k < 12; ++k)
                  ASSERT_EQ(tile[cpu::mm::tile_q4k::scales + 16 * k + r], blk[cpu::blk::q4_k::scales + k]);
                // Element i < 4 (low nibble) and 16 + i (high nibble) of group 0: the file's
                // qs byte i (element i, low nibble) and byte 16 + i (element 16 + i).
                for (int i = 0; i < 4; ++i) {
                  const uint8_t code = tile[cpu::mm::tile_q4k::codes + 4 * r + i];
                  ASSERT_EQ(code & 15, blk[cpu::blk::q4_k::qs + i] & 15);
                  ASSERT_EQ(code >> 4, blk[cpu::blk::q4_k::qs + 16 + i] & 15);
                }
              } else {
                ASSERT_EQ(cpu::blk::u16_at(tile + cpu::mm::tile_q6k::d + 2 * r), cpu::blk::u16_at(blk + cpu::blk::q6_k::d));
                for (int s = 0; s < 16; ++s)
                  ASSERT_EQ(tile[cpu::mm::tile_q6k::scales + 32 * (s / 2) + 2 * r + s % 2], blk[cpu::blk::q6_k::scales + s]);
                // Element i < 4: low 4 bits in N0's low nibble, top 2 at bits 0-1 of H.
                for (int i = 0; i < 4; ++i) {
                  const int code = (tile[cpu::mm::tile_q6k::codes + 4 * r + i] & 15) |
                                   (tile[cpu::mm::tile_q6k::codes + 128 + 4 * r + i] & 3) << 4;
                  const float d = cpu::fp16_to_f32(cpu::blk::u16_at(blk + cpu::blk::q6_k::d));
                  const auto sc = static_cast<int8_t>(blk[cpu::blk::q6_k::scales]);
                  ASSERT_EQ(deq[static_cast<size_t>(i)], d * static_cast<float>(sc) * static_cast<float>(code - 32));
                }
              }
            }
          }
      }
  std::vector<uint8_t> buf(16 * 210);
  EXPECT_THROW(cpu::mm::tile_group(DType::Q5_K, buf.data(), 176, buf.data(), 256), std::invalid_argument);
  EXPECT_THROW(cpu::mm::untile_row(DType::Q4_K, buf.data(), 16, buf.data(), 256), std::invalid_argument);
}

// A kernel level's RowsFn may be handed any row range (the driver hands whole groups, but
// the contract is any split): a group cut by a range computes all its lanes and stores only
// the range's, and every row gets the same bits however the rows are split.
TEST(TiledRows, RowRangesInsideGroupsGiveTheSameBits) {
  IsaGuard guard;
  const int64_t R = 53, C = 512;  // 3 whole groups and 5 rows as stored
  for (DType t : kTiled)
    for (Isa isa : supported_isas()) {
      cpu::force_isa(isa);
      const cpu::mm::IsaKernels* k = isa == Isa::Avx512   ? (cpu::mm::avx512_kernels_for_testing()
                                                                  ? cpu::mm::avx512_kernels_for_testing()
                                                                  : cpu::mm::avx512_kernels())
                                     : isa == Isa::Avx2 ? cpu::mm::avx2_kernels()
                                                        : &cpu::mm::scalar_kernels();
      const cpu::mm::RowsFn fn = k && k->rows_tiled ? k->rows_tiled(t) : nullptr;
      if (!fn) continue;  // this level multiplies tiles through the scalar one
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + cpu::isa_name(isa));
      const std::vector<uint8_t> w = tiled_copy(t, test::random_blocks(t, R * C, 77), R, C);
      for (int64_t N : {1, 3, 9}) {
        const std::vector<float> x = random_x(N * C, 9 + static_cast<uint64_t>(N));
        const cpu::mm::ActLayout l = cpu::mm::act_layout(cpu::mm::Family::QK, C);
        std::vector<uint8_t> xq(l.row_bytes * static_cast<size_t>(N) + 64);
        auto* xq64 = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(xq.data()) + 63) & ~uintptr_t{63});
        for (int64_t i = 0; i < N; ++i) k->quant(t)(&x[static_cast<size_t>(i * C)], l, xq64 + l.row_bytes * static_cast<size_t>(i));
        cpu::mm::Args a;
        a.wt = t;
        a.w = w.data();
        a.w_stride = row_bytes(t, C);
        a.R = R;
        a.C = C;
        a.xq = xq64;
        a.xl = l;
        a.ldy = R;
        std::vector<float> whole(static_cast<size_t>(R * N), -1.0f), split(whole.size(), -2.0f);
        a.y = whole.data();
        fn(a, 0, R, 0, N);
        a.y = split.data();
        const int64_t cuts[] = {0, 5, 16, 27, 45, 50, R};  // ranges that start and end inside groups
        for (size_t c = 0; c + 1 < std::size(cuts); ++c) fn(a, cuts[c], cuts[c + 1], 0, N);
        for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(bits(split[i]), bits(whole[i])) << "N=" << N << " element " << i;
      }
    }
}
}  // namespace
}  // namespace tandem
