// The measurement file (experiments/compare/measurement.h) that compare and sweep read back from
// their measure children: a split model's fields (the ranks, the attention split, the other
// ranks' traces) survive the round trip; files written before they existed read as one rank;
// a wrong type is refused naming the field, and so are times that would bend the verdict (a step
// of zero or negative time, a mode listed twice).
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

std::string error_of(const nlohmann::json& j) {
  try {
    measurement_from_json(j, "bad.json");
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::string();
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

nlohmann::json with_graph_steps(const std::vector<double>& step_ms) {
  Measurement m = split_measurement();
  ModeSamples g;
  g.mode = "graph";
  g.step_ms = step_ms;
  g.target_ms.assign(step_ms.size(), 0.5);
  g.draft_ms.assign(step_ms.size(), 0.25);
  m.modes.push_back(g);
  return to_json(m);
}

TEST(MeasurementJson, StepTimesMustBePositive) {
  EXPECT_EQ(error_of(with_graph_steps({1.0, 1.25})), "");
  EXPECT_NE(error_of(with_graph_steps({1.0, 0.0})).find("bad.json.modes[0].step_ms[1]: 0 ms, expected a time of 1 ns (1e-06 ms) to 1e+07 ms"),
            std::string::npos)
      << error_of(with_graph_steps({1.0, 0.0}));
  EXPECT_NE(error_of(with_graph_steps({-2.0})).find("step_ms[0]: -2 ms"), std::string::npos);
  nlohmann::json j = with_graph_steps({1.0});
  j["modes"][0]["draft_ms"] = {-0.5};
  EXPECT_NE(error_of(j).find("draft_ms[0]: -0.5 ms, expected a time of 0 to 1e+07 ms"), std::string::npos) << error_of(j);
  // Finite but absurd: 1e308 ms made the verdict's interval NaN and its gate pass; a subnormal
  // step read as 100 % faster.
  EXPECT_NE(error_of(with_graph_steps({1.0, 1e308})).find("step_ms[1]: 1e+308 ms"), std::string::npos);
  EXPECT_NE(error_of(with_graph_steps({1e-320})).find("step_ms[0]: "), std::string::npos);
  j = with_graph_steps({1.0});
  j["modes"][0]["target_ms"] = {2e7};
  EXPECT_NE(error_of(j).find("target_ms[0]: 2e+07 ms"), std::string::npos) << error_of(j);
  j = with_graph_steps({1.0});
  j["traced"][0]["untraced_step_ms"] = {0.0};
  EXPECT_NE(error_of(j).find("traced[0].untraced_step_ms[0]: 0 ms"), std::string::npos) << error_of(j);
}

TEST(MeasurementJson, AModeListedTwiceIsRefused) {
  nlohmann::json j = with_graph_steps({1.0, 1.1});
  j["modes"].push_back(j["modes"][0]);
  EXPECT_NE(error_of(j).find("bad.json.modes[1].mode: \"graph\" is listed twice"), std::string::npos) << error_of(j);
}

}  // namespace
}  // namespace sl::compare
