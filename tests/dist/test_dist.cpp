// Data parallelism with real processes: `gpt2 train` under `mpirun --oversubscribe -np 2` and
// with `--nproc 2`, against single-process runs of the same global batch.
#include "dist_test.h"

#include "apps/gpt2/train/distributed.h"

using namespace keel;
using namespace keel::dist_test;

namespace {

// The runs several cases compare against, made once.
const fs::path& world2_run() {
  static fs::path d = [] {
    fs::path run_dir = scratch().dir / "w2";
    int rc = run(kMpirun + " -np 2 " + kGpt2 + train_args(run_dir, "--batch-size 2"), scratch().dir / "w2.log");
    INFO(read_text(scratch().dir / "w2.log"));
    REQUIRE(rc == 0);
    return run_dir;
  }();
  return d;
}

}  // namespace

TEST_CASE("world 2 x B equals world 1 x 2B and world 1 x B with accumulation 2") {
  const fs::path& w2 = world2_run();
  std::string log = read_text(scratch().dir / "w2.log");
  CHECK(log.find("backend mpi, world 2 (mpirun)") != std::string::npos);
  // Every rank checks at each checkpoint that its parameters are bit-identical to rank 0's
  // (the run fails otherwise), and only rank 0 wrote: one config, one metrics log.
  CHECK(read_text(w2 / "config.json").find("\"world\": 2") != std::string::npos);

  fs::path w1 = scratch().dir / "w1", w1a = scratch().dir / "w1a";
  REQUIRE(run(kGpt2 + train_args(w1, "--batch-size 4"), scratch().dir / "w1.log") == 0);
  REQUIRE(run(kGpt2 + train_args(w1a, "--batch-size 2 --grad-accum 2"), scratch().dir / "w1a.log") == 0);
  CHECK(max_rel_diff(w2, w1) < 1e-6);
  CHECK(max_rel_diff(w2, w1a) < 1e-6);
  CHECK(max_rel_diff(w1, w1a) < 1e-6);
}

TEST_CASE("gpt2 train --nproc 2 runs the same job as mpirun -np 2, bit for bit") {
  fs::path run_dir = scratch().dir / "nproc";
  int rc = run(kGpt2 + train_args(run_dir, "--batch-size 2 --nproc 2"), scratch().dir / "nproc.log");
  INFO(read_text(scratch().dir / "nproc.log"));
  REQUIRE(rc == 0);
  CHECK(bit_identical(run_dir, world2_run()));
}

TEST_CASE("a world-2 run resumed at world 2 is bit-exact, and at world 1 keeps the global batch") {
  // The run interrupted after step 5: world2_run's directory as it was then.
  auto interrupted = [](const std::string& name) {
    fs::path d = scratch().dir / name;
    fs::remove_all(d);
    fs::copy(world2_run(), d, fs::copy_options::recursive);
    fs::remove_all(d / "checkpoints/step_00000010");
    return d;
  };
  fs::path r2 = interrupted("resume2");
  int rc = run(kMpirun + " -np 2 " + kGpt2 + " train --resume --run-dir " + q(r2) + " --data " + q(dataset()),
               scratch().dir / "resume2.log");
  INFO(read_text(scratch().dir / "resume2.log"));
  REQUIRE(rc == 0);
  CHECK(bit_identical(r2, world2_run()));

  fs::path r1 = interrupted("resume1");
  rc = run(kGpt2 + " train --resume --run-dir " + q(r1) + " --data " + q(dataset()), scratch().dir / "resume1.log");
  std::string log = read_text(scratch().dir / "resume1.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("accum=2") != std::string::npos);  // B = 2 kept, accumulation makes the global 4
  CHECK(max_rel_diff(r1, world2_run()) < 1e-6);
}

// Optimizer state of a run's final checkpoint, every entry compared: the largest difference.
static double max_state_diff(const fs::path& a, const fs::path& b) {
  auto sa = nn::load_safetensors(a / "checkpoints/step_00000010/optimizer.safetensors").tensors;
  auto sb = nn::load_safetensors(b / "checkpoints/step_00000010/optimizer.safetensors").tensors;
  REQUIRE(sa.size() == sb.size());
  double worst = 0;
  for (size_t k = 0; k < sa.size(); ++k) {
    REQUIRE(sa[k].first == sb[k].first);
    auto va = sa[k].second.to_vector<double>(), vb = sb[k].second.to_vector<double>();
    REQUIRE(va.size() == vb.size());
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  }
  return worst;
}

// "gpt2 train: ZeRO-1, optimizer state A MB on rank 0 (B MB unsharded)": A and B.
static std::pair<double, double> zero_state_mb(const std::string& log) {
  const std::string key = "ZeRO-1, optimizer state ";
  size_t at = log.find(key);
  REQUIRE(at != std::string::npos);
  double mine = 0, whole = 0;
  REQUIRE(std::sscanf(log.c_str() + at + key.size(), "%lf MB on rank 0 (%lf MB unsharded)", &mine, &whole) == 2);
  return {mine, whole};
}

TEST_CASE("ZeRO-1 equals plain data parallelism, holds half the state per rank, and resumes without ZeRO") {
  fs::path z2 = scratch().dir / "zero2";
  int rc = run(kMpirun + " -np 2 " + kGpt2 + train_args(z2, "--batch-size 2 --zero 1"), scratch().dir / "zero2.log");
  std::string log = read_text(scratch().dir / "zero2.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(max_rel_diff(z2, world2_run()) < 1e-6);
  // Rank 0 gathered the whole state into its checkpoint: the plain run's, to f32 rounding.
  CHECK(max_state_diff(z2, world2_run()) < 1e-6);
  CHECK(read_text(z2 / "config.json").find("\"zero\": 1") != std::string::npos);
  auto [mine, whole] = zero_state_mb(log);
  CHECK(whole > 0);
  CHECK(mine <= whole / 2 + 0.01);  // m and v of half the parameters (MB printed to 2 places)

  // Interrupted after step 5 and resumed by one process without ZeRO: the same run.
  fs::path r1 = scratch().dir / "zero_resume1";
  fs::remove_all(r1);
  fs::copy(z2, r1, fs::copy_options::recursive);
  fs::remove_all(r1 / "checkpoints/step_00000010");
  rc = run(kGpt2 + " train --resume --zero 0 --run-dir " + q(r1) + " --data " + q(dataset()),
           scratch().dir / "zero_resume1.log");
  INFO(read_text(scratch().dir / "zero_resume1.log"));
  REQUIRE(rc == 0);
  CHECK(max_rel_diff(r1, world2_run()) < 1e-6);
  CHECK(read_text(r1 / "config.json").find("\"zero\": 0") != std::string::npos);
}

TEST_CASE("gradients reduced in bf16 train like f32, with and without ZeRO") {
  for (const std::string zero : {"0", "1"}) {
    CAPTURE(zero);
    fs::path d = scratch().dir / ("bf16_zero" + zero);
    int rc = run(kMpirun + " -np 2 " + kGpt2 + train_args(d, "--batch-size 2 --reduce-dtype bf16 --zero " + zero),
                 scratch().dir / "bf16.log");
    INFO(read_text(scratch().dir / "bf16.log"));
    REQUIRE(rc == 0);
    // bf16 keeps 8 bits of mantissa: each gradient is off by up to 2^-9 relative, which moves
    // Adam's steps (normalised by the gradient's own size) far less. The losses stay within 1e-3.
    auto a = losses(d), b = losses(world2_run());
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / b[i]);
    CHECK(worst < 1e-3);
    CHECK(worst > 0);  // bf16 did change something: the flag reached the reduction
  }
}

TEST_CASE("with dropout each rank draws its own masks, and a world-2 resume is still bit-exact") {
  // Rank 0 keeps the run's stream (one process is unchanged); the others get streams of their own.
  CHECK(app::dropout_seed_for_rank(1337, 0) == 1337);
  CHECK(app::dropout_seed_for_rank(1337, 1) != 1337);
  CHECK(app::dropout_seed_for_rank(1337, 1) != app::dropout_seed_for_rank(1337, 2));
  CHECK(app::dropout_seed_for_rank(1337, 1) == app::dropout_seed_for_rank(1337, 1));

  fs::path full = scratch().dir / "dropout", cut = scratch().dir / "dropout_cut";
  int rc = run(kMpirun + " -np 2 " + kGpt2 + train_args(full, "--batch-size 2 --dropout 0.1"),
               scratch().dir / "dropout.log");
  INFO(read_text(scratch().dir / "dropout.log"));
  REQUIRE(rc == 0);
  fs::copy(full, cut, fs::copy_options::recursive);
  fs::remove_all(cut / "checkpoints/step_00000010");
  rc = run(kMpirun + " -np 2 " + kGpt2 + " train --resume --run-dir " + q(cut) + " --data " + q(dataset()),
           scratch().dir / "dropout_resume.log");
  INFO(read_text(scratch().dir / "dropout_resume.log"));
  REQUIRE(rc == 0);
  // Rank 1 resumed with rank 0's stream (or a fresh one) would give other losses from step 6 on.
  CHECK(bit_identical(cut, full));
  CHECK(!bit_identical(full, world2_run()));  // dropout was on
}

TEST_CASE("a resume whose global batch the new world cannot make up fails on every rank, writing nothing") {
  fs::path d = scratch().dir / "indivisible";
  fs::remove_all(d);
  fs::copy(world2_run(), d, fs::copy_options::recursive);
  fs::remove_all(d / "checkpoints/step_00000010");
  const std::string config = read_text(d / "config.json"), metrics = read_text(d / "metrics.jsonl");
  // The global batch is 4 sequences; 2 ranks x batch 3 is 6 per step.
  int rc = run(kMpirun + " -np 2 " + kGpt2 + " train --resume --batch-size 3 --run-dir " + q(d) + " --data " +
                   q(dataset()),
               scratch().dir / "indivisible.log");
  std::string log = read_text(scratch().dir / "indivisible.log");
  INFO(log);
  CHECK(rc != 0);
  CHECK(log.find("rank 0: ") != std::string::npos);
  CHECK(log.find("rank 1: ") != std::string::npos);
  CHECK(log.find("cannot make up") != std::string::npos);
  CHECK(read_text(d / "config.json") == config);
  CHECK(read_text(d / "metrics.jsonl") == metrics);
  CHECK(!fs::exists(d / "checkpoints/step_00000010"));
}

TEST_CASE("ranks started with different configurations stop with one error each, writing nothing") {
  fs::path run_dir = scratch().dir / "differ";
  int rc = run(kMpirun + " -np 1 " + kGpt2 + train_args(run_dir, "--batch-size 2 --weight-decay 0.1") + " : -np 1 " +
                   kGpt2 + train_args(run_dir, "--batch-size 2 --weight-decay 0.2"),
               scratch().dir / "differ.log");
  std::string log = read_text(scratch().dir / "differ.log");
  INFO(log);
  CHECK(rc != 0);
  CHECK(log.find("configuration of rank 1 differs from rank 0") != std::string::npos);
  CHECK(!fs::exists(run_dir / "config.json"));
}

TEST_CASE("a rank killed with SIGKILL ends the job within the timeout, naming the lost rank") {
  fs::path run_dir = scratch().dir / "kill", log = scratch().dir / "kill.log";
  pid_t job = ::fork();
  REQUIRE(job >= 0);
  if (job == 0) {
    ::setpgid(0, 0);
    std::string cmd = kMpirun + " -np 2 " + kGpt2 + train_args(run_dir, "--batch-size 2", 1000000) +
                      " > " + q(log) + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    std::_Exit(127);
  }
  // Once training runs (metrics appear), find rank 1 among mpirun's children and kill it.
  auto start = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  pid_t victim = 0;
  int status = 0;
  while (victim == 0 && since() < 60 && ::waitpid(job, &status, WNOHANG) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(run_dir / "metrics.jsonl")) continue;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::string env = read_text(e.path() / "environ");
      if (env.find("OMPI_COMM_WORLD_RANK=1") == std::string::npos) continue;
      // This job's rank only (other tests may run jobs at the same time).
      if (read_text(e.path() / "cmdline").find(run_dir.string()) == std::string::npos) continue;
      victim = std::stoi(e.path().filename().string());
    }
  }
  INFO(read_text(log));
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  start = std::chrono::steady_clock::now();
  pid_t done = 0;
  while (done == 0 && since() < 120) {
    done = ::waitpid(job, &status, WNOHANG);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (done == 0) ::kill(-job, SIGKILL), ::waitpid(job, &status, 0);
  INFO(read_text(log));
  REQUIRE(done == job);
  CHECK(since() < 60);
  CHECK((!WIFEXITED(status) || WEXITSTATUS(status) != 0));
  CHECK(read_text(log).find("rank 1") != std::string::npos);
}

TEST_CASE("Ctrl-C on the --nproc launcher makes every rank checkpoint once and exit 0") {
  fs::path run_dir = scratch().dir / "sigint", log = scratch().dir / "sigint.log";
  pid_t job = ::fork();
  REQUIRE(job >= 0);
  if (job == 0) {
    std::string cmd = kGpt2 + train_args(run_dir, "--batch-size 2 --nproc 2", 1000000, 0) +
                      " > " + q(log) + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    std::_Exit(127);
  }
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while (!fs::exists(run_dir / "metrics.jsonl") && (done = ::waitpid(job, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (done == 0) {
    ::kill(job, SIGINT);
    ::waitpid(job, &status, 0);
  }
  std::string text = read_text(log);
  INFO(text);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(text.find("stopped by a signal") != std::string::npos);
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints")) checkpoints += e.is_directory();
  CHECK(checkpoints == 1);
}
