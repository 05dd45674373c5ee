// Speculative decoding's host side (docs/speculative.md): how many drafts a verifying decode
// step accepts. The real rule is greedy (a draft stands if the target, one position earlier,
// predicted it); random weights almost never agree with their drafts, so a run can force the
// count to study the step's cost at a given acceptance.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sl {

struct AcceptRule {
  enum class Kind {
    Greedy,  // the longest prefix of drafts that the target's greedy tokens confirm
    Count,   // min(count, k) drafts every step
    Rate,    // each draft independently with probability `rate`; the prefix up to the first rejection
  };
  Kind kind = Kind::Greedy;
  int count = 0;
  double rate = 0.0;
  uint64_t seed = 0;  // Rate: the draws are a pure function of (seed, step, sequence, draft)
};

// "greedy", "N" (N >= 0) or "rate:R[:SEED]" (0 <= R <= 1, SEED an unsigned integer, default 0).
// Throws sl::Error quoting the text and the expected forms.
AcceptRule parse_accept_rule(const std::string& text);
// The text parse_accept_rule reads back ("greedy", "3", "rate:0.7:42").
std::string accept_rule_str(const AcceptRule& r);

// The forced counts of one verifying step (the accept_drafts op's `forced` input): -1 per
// sequence for Greedy, min(count, k) for Count, the drawn prefix length for Rate. `step`
// numbers the verifying steps of a run (from 0), so a run's counts do not depend on anything
// else (batch size aside: sequence b of step n always draws the same).
std::vector<int32_t> forced_accept_counts(const AcceptRule& r, int batch, int k, uint64_t step);

}  // namespace sl
