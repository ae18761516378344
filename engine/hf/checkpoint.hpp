// The weights of a Hugging Face model folder: `model.safetensors`, or the shards that
// `model.safetensors.index.json` lists, every one opened (memory-mapped and validated) and
// every tensor found where the index says. A missing or truncated shard, a tensor the index
// names but its shard lacks, or one held twice is an error naming the file.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/hf/safetensors.hpp"

namespace tandem::hf {

class Checkpoint {
 public:
  struct Entry {
    const st::File* file;
    const st::TensorInfo* info;
  };
  static std::unique_ptr<Checkpoint> open(const std::string& dir);  // throws std::runtime_error

  const std::vector<Entry>& tensors() const { return entries_; }

 private:
  std::vector<std::unique_ptr<st::File>> shards_;
  std::vector<Entry> entries_;
};

}  // namespace tandem::hf
