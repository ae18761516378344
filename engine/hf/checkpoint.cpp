#include "engine/hf/checkpoint.hpp"

#include <map>
#include <set>
#include <stdexcept>

#include "engine/hf/hf_json.hpp"

namespace tandem::hf {

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  const std::string single = dir + "/model.safetensors", index_path = dir + "/model.safetensors.index.json";
  // Which tensor each shard must hold (empty for a single file: whatever it has).
  std::map<std::string, std::set<std::string>> wanted;
  if (file_exists(index_path)) {
    const boost::json::object index = read_json_object(index_path);
    const boost::json::value* map = index.if_contains("weight_map");
    if (!map || !map->is_object() || map->as_object().empty())
      throw std::runtime_error(index_path + ": no 'weight_map' of tensor names to shard files");
    for (const auto& kv : map->as_object()) {
      if (!kv.value().is_string()) throw std::runtime_error(index_path + ": weight_map entry '" + std::string(kv.key()) + "' is not a file name");
      const std::string shard(kv.value().as_string());
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        throw std::runtime_error(index_path + ": shard name '" + shard + "' is not a file name in the folder");
      wanted[shard].insert(std::string(kv.key()));
    }
  } else if (file_exists(single)) {
    wanted[ "model.safetensors" ];
  } else {
    throw std::runtime_error(dir + ": no weights (neither model.safetensors nor model.safetensors.index.json)");
  }
  std::set<std::string> seen;
  for (const auto& [shard, names] : wanted) {
    const std::string path = dir + "/" + shard;
    if (!file_exists(path)) throw std::runtime_error(path + ": missing shard (listed in model.safetensors.index.json)");
    try {
      c->shards_.push_back(st::File::open(path));
    } catch (const st::Error& e) {
      throw std::runtime_error(e.what());
    }
    const st::File& f = *c->shards_.back();
    for (const std::string& n : names)
      if (!f.find(n)) throw std::runtime_error(path + ": tensor '" + n + "' is missing (the index puts it here)");
    for (const st::TensorInfo& t : f.tensors()) {
      if (!names.empty() && !names.count(t.name)) continue;  // not the index's copy
      if (!seen.insert(t.name).second) throw std::runtime_error(path + ": tensor '" + t.name + "' is held by two shards");
      c->entries_.push_back({&f, &t});
    }
  }
  return c;
}

}  // namespace tandem::hf
