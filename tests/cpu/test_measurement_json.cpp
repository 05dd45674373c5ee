// The measurement file (experiments/compare/measurement.h) that compare and sweep read back from
// their measure children: a split model's fields (the ranks, the attention split, the other
// ranks' traces) survive the round trip; files written before they existed read as one rank;
// a wrong type is refused naming the field.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "experiments/compare/measurement.h"

namespace sl::compare {
namespace {

Measurement split_measurement() {
  Measurement m;
  m.provenance = nlohmann::json::object();
  m.config = "flash-6l";
  m.policy = "shared";
  m.expert_ranks = 4;
  m.attention_tp = true;
  TracedWindow w;
  w.mode = "eager";
  w.trace_json = "shared.eager.json";
  w.rank_traces = {"shared.eager.rank1.json", "shared.eager.rank2.json", "shared.eager.rank3.json"};
  m.traced.push_back(w);
  return m;
}

TEST(MeasurementJson, SplitModelRoundTrips) {
  const Measurement back = measurement_from_json(to_json(split_measurement()), "m.json");
  EXPECT_EQ(back.expert_ranks, 4);
  EXPECT_TRUE(back.attention_tp);
  ASSERT_EQ(back.traced.size(), 1u);
  EXPECT_EQ(back.traced[0].rank_traces, split_measurement().traced[0].rank_traces);
}

TEST(MeasurementJson, OlderFilesAreOneRank) {
  nlohmann::json j = to_json(split_measurement());
  j["model"].erase("expert_ranks");
  j["model"].erase("attention_tp");
  j["traced"][0].erase("rank_traces");
  const Measurement back = measurement_from_json(j, "old.json");
  EXPECT_EQ(back.expert_ranks, 1);
  EXPECT_FALSE(back.attention_tp);
  EXPECT_TRUE(back.traced[0].rank_traces.empty());
}

TEST(MeasurementJson, WrongTypesAreRefusedByName) {
  auto error_of = [](const nlohmann::json& j) {
    try {
      measurement_from_json(j, "bad.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json j = to_json(split_measurement());
  j["model"]["expert_ranks"] = "four";
  EXPECT_NE(error_of(j).find("expert_ranks"), std::string::npos) << error_of(j);
  j = to_json(split_measurement());
  j["model"]["expert_ranks"] = 0;
  EXPECT_NE(error_of(j).find("bad.json.model.expert_ranks: 0 is outside 1..1024"), std::string::npos) << error_of(j);
  j = to_json(split_measurement());
  j["traced"][0]["rank_traces"] = {1, 2};
  EXPECT_NE(error_of(j).find("rank_traces: expected an array of file names"), std::string::npos) << error_of(j);
}

}  // namespace
}  // namespace sl::compare
