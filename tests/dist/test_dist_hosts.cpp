// Data parallelism across hosts, on one machine: two "hosts" are network namespaces, each with
// its own address on a veth pair between them, so the ranks reach each other only through that
// link, by address, as on two machines. `mpirun` starts the remote rank through an rsh agent
// (tests/dist/netns_rsh.sh); torchrun's variables point MASTER_ADDR at the other host. Then a
// rank is killed, or the link goes down, and every rank must end with a message.
//
// Creating namespaces needs CAP_SYS_ADMIN (root in a container that allows it). Where the kernel
// refuses, every case prints a KEEL_SKIP line saying so, which ctest reports as skipped.
#include "dist_test.h"

#include <functional>
#include <map>
#include <sstream>

using namespace keel;
using namespace keel::dist_test;

namespace {

const std::string kRsh = std::string(KEEL_SOURCE_DIR) + "/tests/dist/netns_rsh.sh";

// Runs `cmd` quietly; true when it succeeded. `out` gets its output.
bool sh(const std::string& cmd, std::string* out = nullptr) {
  fs::path log = scratch().dir / "sh.log";
  const bool ok = run(cmd, log) == 0;
  if (out) *out = read_text(log);
  return ok;
}

// Kills what runs in namespace `ns` and deletes it (its end of the veth pair goes with it).
void remove_namespace(const std::string& ns) {
  sh("ip netns pids " + ns + " | xargs -r kill -9");
  sh("ip netns del " + ns);
}

// Two hosts, A (x.x.x.1) and B (x.x.x.2), named after this process so that tests running at the
// same time do not meet; removed, with everything running in them, when the object dies (also
// when a check fails). Namespaces left by a test process that crashed are removed first.
class TwoHosts {
 public:
  TwoHosts() {
    std::string listed;
    sh("ip netns list", &listed);
    for (size_t at = listed.find("keel-"); at != std::string::npos; at = listed.find("keel-", at + 1)) {
      std::string ns = listed.substr(at, listed.find_first_of(" \n", at) - at);
      const int pid = std::atoi(ns.c_str() + 5);
      if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0) remove_namespace(ns);
    }
    const int pid = ::getpid();
    a = "keel-" + std::to_string(pid) + "-a";
    b = "keel-" + std::to_string(pid) + "-b";
    const std::string net = "10." + std::to_string((pid >> 8) % 256) + "." + std::to_string(pid % 256) + ".";
    addr_a = net + "1", addr_b = net + "2", subnet = net + "0/24";
    veth_a = "kv" + std::to_string(pid) + "a", veth_b = "kv" + std::to_string(pid) + "b";
    std::string why;
    if (!sh("ip netns add " + a, &why)) {
      reason = "cannot create a network namespace here (`ip netns add`: " + why.substr(0, why.find('\n')) + ")";
      return;
    }
    created_ = true;
    const bool ok = sh("ip netns add " + b) && sh("ip link add " + veth_a + " type veth peer name " + veth_b, &why) &&
                    sh("ip link set " + veth_a + " netns " + a) && sh("ip link set " + veth_b + " netns " + b) &&
                    sh("ip -n " + a + " addr add " + addr_a + "/24 dev " + veth_a) &&
                    sh("ip -n " + b + " addr add " + addr_b + "/24 dev " + veth_b) &&
                    sh("ip -n " + a + " link set lo up") && sh("ip -n " + b + " link set lo up") &&
                    sh("ip -n " + a + " link set " + veth_a + " up") &&
                    sh("ip -n " + b + " link set " + veth_b + " up") &&
                    sh("ip netns exec " + b + " unshare --uts true", &why);
    if (!ok) reason = "cannot join two network namespaces with a veth pair here: " + why.substr(0, why.find('\n'));
  }
  ~TwoHosts() {
    if (!created_) return;
    remove_namespace(a);
    remove_namespace(b);
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  bool usable() const { return reason.empty(); }

  // A command line that runs `cmd` on host `ns` with a hostname of its own (see netns_rsh.sh).
  // The command goes through a script file, so it may hold any quoting.
  std::string on(const std::string& ns, const std::string& cmd) {
    fs::path script = scratch().dir / (ns + "-" + std::to_string(scripts_++) + ".sh");
    std::ofstream(script) << "hostname " << ns << "\nexec " << cmd << "\n";
    return "ip netns exec " + ns + " unshare --uts sh " + q(script);
  }

  // mpirun on host A starting rank 0 there and rank 1 on host B, over the veth link only.
  std::string mpirun(const std::string& env) const {
    return "env " + env + " " + kMpirun + " --host " + addr_a + ":1," + addr_b + ":1 -np 2 --display-map" +
           " --mca plm_rsh_agent " + kRsh + " --mca oob_tcp_if_include " + subnet + " --mca btl tcp,self" +
           " --mca btl_tcp_if_include " + subnet + " --mca oob_tcp_keepalive_time 4 --mca oob_tcp_keepalive_intvl 2" +
           " --mca oob_tcp_keepalive_probes 2 -x KEEL_DIST_TIMEOUT ";
  }

  // torchrun's variables of rank r: one rank per host, rank 0 on A.
  std::string torchrun_env(int rank) const {
    return "RANK=" + std::to_string(rank) + " LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 MASTER_ADDR=" + addr_a +
           " MASTER_PORT=29500";
  }

  // The pids of gpt2 processes of run `run_dir` in namespace ns.
  std::vector<pid_t> ranks(const std::string& ns, const fs::path& run_dir) {
    std::string listed;
    sh("ip netns pids " + ns, &listed);
    std::istringstream in(listed);
    std::vector<pid_t> in_ns, out;
    for (pid_t p; in >> p;) in_ns.push_back(p);
    for (pid_t p : find_processes(run_dir.string()))
      if (read_text("/proc/" + std::to_string(p) + "/cmdline").rfind(kGpt2, 0) == 0 &&
          std::find(in_ns.begin(), in_ns.end(), p) != in_ns.end())
        out.push_back(p);
    return out;
  }

  std::string a, b, addr_a, addr_b, subnet, veth_a, veth_b, reason;

 private:
  bool created_ = false;
  int scripts_ = 0;
};

#define KEEL_REQUIRE_HOSTS(hosts)                                                        \
  do {                                                                                   \
    if (!(hosts).usable()) {                                                             \
      std::printf("KEEL_SKIP: %s; the multi-host tests did not run\n", (hosts).reason.c_str()); \
      return;                                                                            \
    }                                                                                    \
  } while (0)

// One process with the double batch: what two ranks must reproduce.
const fs::path& world1_run(const std::string& device) {
  static std::map<std::string, fs::path> runs;
  if (!runs.count(device)) {
    fs::path d = scratch().dir / ("w1_" + device);
    int rc = run(kGpt2 + train_args(d, "--batch-size 4", 10, 5, device), scratch().dir / ("w1_" + device + ".log"));
    INFO(read_text(scratch().dir / ("w1_" + device + ".log")));
    REQUIRE(rc == 0);
    runs[device] = d;
  }
  return runs[device];
}

// Starts a 2-rank job that trains until stopped, lets it train, breaks it with `fault`, and
// checks that every rank (on both hosts) and the job end within 60 s with a message.
void check_fault_ends_job(TwoHosts& h, Job& job, const fs::path& run_dir, const std::function<void()>& fault,
                          const std::vector<std::string>& messages, const std::function<std::string()>& log) {
  REQUIRE(wait_for_file(run_dir / "metrics.jsonl", job, 120));
  REQUIRE(h.ranks(h.a, run_dir).size() == 1);
  REQUIRE(h.ranks(h.b, run_dir).size() == 1);
  fault();
  const auto start = std::chrono::steady_clock::now();
  while ((!h.ranks(h.a, run_dir).empty() || !h.ranks(h.b, run_dir).empty()) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool job_ended = job.wait(std::max(1.0, 60 - took));
  std::string text = log();
  INFO(text);
  CHECK(h.ranks(h.a, run_dir).empty());
  CHECK(h.ranks(h.b, run_dir).empty());
  CHECK(job_ended);
  CHECK(job.status() != 0);
  // One of `messages` says why (which one depends on who noticed first).
  bool said = false;
  for (const std::string& m : messages) said = said || text.find(m) != std::string::npos;
  CHECK(said);
}

}  // namespace

TEST_CASE("two hosts: mpirun across the link equals one process with the double batch") {
  TwoHosts h;
  KEEL_REQUIRE_HOSTS(h);
  fs::path d = scratch().dir / "hosts_mpirun";
  int rc = run(h.on(h.a, h.mpirun("KEEL_DIST_TIMEOUT=30") + kGpt2 + train_args(d, "--batch-size 2")),
               scratch().dir / "hosts_mpirun.log");
  std::string log = read_text(scratch().dir / "hosts_mpirun.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("Data for node: " + h.addr_b) != std::string::npos);  // rank 1 placed on host B
  CHECK(log.find("backend mpi, world 2 (mpirun)") != std::string::npos);
  CHECK(max_rel_diff(d, world1_run("cpu")) < 1e-6);
}

TEST_CASE("two hosts: torchrun variables with MASTER_ADDR on the other host, NCCL on emulated GPUs") {
  TwoHosts h;
  KEEL_REQUIRE_HOSTS(h);
  fs::path d = scratch().dir / "hosts_torchrun";
  Job r1(h.on(h.b, "env " + h.torchrun_env(1) + " " + kGpt2 + train_args(d, "--batch-size 2", 10, 5, "cuda")),
         scratch().dir / "hosts_torchrun1.log");
  int rc = run(h.on(h.a, "env " + h.torchrun_env(0) + " " + kGpt2 + train_args(d, "--batch-size 2", 10, 5, "cuda")),
               scratch().dir / "hosts_torchrun0.log");
  INFO(read_text(scratch().dir / "hosts_torchrun0.log"));
  REQUIRE(rc == 0);
  REQUIRE(r1.wait(60));
  INFO(r1.log());
  CHECK(r1.status() == 0);
  CHECK(max_rel_diff(d, world1_run("cuda")) < 1e-6);
}

TEST_CASE("two hosts: a rank killed on host B, or B's link going down, ends every rank within 60 s") {
  TwoHosts h;
  KEEL_REQUIRE_HOSTS(h);
  SUBCASE("mpirun, rank 1 killed") {
    fs::path d = scratch().dir / "hosts_kill";
    Job job(h.on(h.a, h.mpirun("KEEL_DIST_TIMEOUT=10") + kGpt2 + train_args(d, "--batch-size 2", 1000000)),
            scratch().dir / "hosts_kill.log");
    check_fault_ends_job(
        h, job, d, [&] { ::kill(h.ranks(h.b, d).at(0), SIGKILL); }, {"process rank 1"}, [&] { return job.log(); });
  }
  SUBCASE("mpirun, link down") {
    // mpirun's keepalives (mpirun() above) notice the lost host within seconds and end the
    // job; keel's watchdog (20 s here) is the fallback. Without the keepalives the ranks still
    // end (the watchdog), but mpirun waits for host B's daemon for as long as TCP keeps trying.
    fs::path d = scratch().dir / "hosts_link";
    Job job(h.on(h.a, h.mpirun("KEEL_DIST_TIMEOUT=20") + kGpt2 + train_args(d, "--batch-size 2", 1000000)),
            scratch().dir / "hosts_link.log");
    check_fault_ends_job(
        h, job, d, [&] { sh("ip -n " + h.b + " link set " + h.veth_b + " down"); },
        // Open MPI words a lost daemon in one of two ways, depending on when its keepalive fires.
        {"lost communication with a remote daemon", "unable to reliably start one or more daemons",
         "did not complete in 20 s"},
        [&] { return job.log(); });
  }
  SUBCASE("torchrun variables, link down") {
    // Both ranks wait in a collective whose bytes never arrive: each stops after KEEL_DIST_TIMEOUT.
    fs::path d = scratch().dir / "hosts_torchrun_link";
    const std::string args = train_args(d, "--batch-size 2", 1000000, 5, "cuda");
    Job r0(h.on(h.a, "env KEEL_DIST_TIMEOUT=8 " + h.torchrun_env(0) + " " + kGpt2 + args),
           scratch().dir / "hosts_torchrun_link0.log");
    Job r1(h.on(h.b, "env KEEL_DIST_TIMEOUT=8 " + h.torchrun_env(1) + " " + kGpt2 + args),
           scratch().dir / "hosts_torchrun_link1.log");
    check_fault_ends_job(
        h, r0, d, [&] { sh("ip -n " + h.b + " link set " + h.veth_b + " down"); },
        {"timed out waiting for a peer"}, [&] { return r0.log() + r1.log(); });
    CHECK(r1.wait(1));
    CHECK(r1.status() != 0);
  }
}
