// File: common/vector_program.h
//
// The vector operations Sandblaster L-BFGS runs where the parameters live:
// the coordinator (worker/sandblaster_lbfgs.h) sends a short program of
// these to every shard (server/lbfgs_shard.h runs it on the shard's slices)
// and gets back only the dot products, summed over the shards by the
// caller. Transport-neutral; proto/sandblaster.proto carries the same
// fields.
//
//   std::vector<VectorOp> p = {VectorOp::Dot(Vec::kG, Vec::kD)};
//   DP_ASSIGN_OR_RETURN(std::vector<double> dots, ops->Run(p));  // {g.d}
//
// Plain structs; thread-compatible.
#ifndef DOWNPOUR_COMMON_VECTOR_PROGRAM_H_
#define DOWNPOUR_COMMON_VECTOR_PROGRAM_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace downpour {

// The shard-side vectors, each the shard's slice of a full-model vector.
enum class VecKind : int32_t {
  kX = 0,       // The parameters (what pulls serve once published).
  kG = 1,       // The gradient at the base point.
  kD = 2,       // The search direction.
  kXBase = 3,   // The line search's base point.
  kGTrial = 4,  // The gradient at the line search's trial point.
  kS = 5,       // History slot `slot`: s = x_{k+1} - x_k.
  kY = 6,       // History slot `slot`: y = g_{k+1} - g_k.
};
inline constexpr int32_t kMaxVecKind = 6;
// The most history slots a shard keeps (--lbfgs_history's bound).
inline constexpr int32_t kMaxHistorySlots = 64;

struct VecRef {
  VecKind kind = VecKind::kX;
  int32_t slot = 0;  // For kS and kY only.
};

struct VectorOp {
  enum class Kind : int32_t {
    kDot = 0,      // Appends a . b to the result.
    kAxpy = 1,     // a += alpha * b
    kScale = 2,    // a *= alpha
    kCopy = 3,     // a = b
    kGather = 4,   // a = alpha * (sum of the accumulations of `workers`
                   // for evaluation `eval`); the accumulations are dropped.
    kPublish = 5,  // The parameters x become what the shard serves.
    kLoad = 6,     // x = what the shard serves (the declared values);
                   // the shard keeps `history` (s, y) slots from now on.
    kOpen = 7,     // Evaluation `eval` (>= 1) is the one Accumulate takes;
                   // every accumulation of another one is dropped.
  };
  Kind kind = Kind::kDot;
  VecRef a, b;
  double alpha = 0;  // Finite.
  int64_t eval = 0;
  std::vector<int32_t> workers;  // Distinct.
  int32_t history = 0;           // kLoad: in [1, kMaxHistorySlots].

  static VectorOp Dot(VecRef a, VecRef b) { return {Kind::kDot, a, b}; }
  static VectorOp Axpy(VecRef a, double alpha, VecRef b) {
    return {Kind::kAxpy, a, b, alpha};
  }
  static VectorOp Scale(VecRef a, double alpha) {
    return {Kind::kScale, a, {}, alpha};
  }
  static VectorOp Copy(VecRef a, VecRef b) { return {Kind::kCopy, a, b}; }
  static VectorOp Gather(VecRef a, double alpha, int64_t eval,
                         std::vector<int32_t> workers) {
    return {Kind::kGather, a, {}, alpha, eval, std::move(workers)};
  }
  static VectorOp Publish() { return {Kind::kPublish}; }
  static VectorOp Load(int32_t history = kMaxHistorySlots) {
    VectorOp op;
    op.kind = Kind::kLoad;
    op.history = history;
    return op;
  }
  static VectorOp Open(int64_t eval) {
    VectorOp op;
    op.kind = Kind::kOpen;
    op.eval = eval;
    return op;
  }
};

inline VecRef S(int32_t slot) { return {VecKind::kS, slot}; }
inline VecRef Y(int32_t slot) { return {VecKind::kY, slot}; }
inline constexpr VecRef kVecX{VecKind::kX, 0};
inline constexpr VecRef kVecG{VecKind::kG, 0};
inline constexpr VecRef kVecD{VecKind::kD, 0};
inline constexpr VecRef kVecXBase{VecKind::kXBase, 0};
inline constexpr VecRef kVecGTrial{VecKind::kGTrial, 0};

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_VECTOR_PROGRAM_H_
