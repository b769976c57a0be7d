//! A sweep run as a Slurm job array equals the single-process sweep. Starts a throw-away
//! single-node Slurm (munged, slurmctld, slurmd from Debian's packages, no systemd) on loopback in
//! a temporary directory, submits `slurm/sweep_array.sbatch` as a 4-task array, merges the slices
//! with `dagsim sweep merge` and compares the bytes. Reported as ignored, saying why, when Slurm or
//! munge is not installed; with `DAGSIM_REQUIRE_SLURM=1` (set by `.ci/run`, which installs them)
//! their absence is a failure instead, so CI cannot pass without running it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Finds a program on PATH or in the sbin directories Debian installs daemons into.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(PathBuf::from)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Daemons we started; killed (by their own pid) when the test ends, pass or fail.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let name = "slurm_array_sweep_equals_single_process_sweep";
    let trial = libtest_mimic::Trial::ignorable_test(name, || {
        let tools = ["munged", "slurmctld", "slurmd", "sbatch", "sinfo"];
        let found: Vec<Option<PathBuf>> = tools.iter().map(|t| which(t)).collect();
        if let Some(i) = found.iter().position(Option::is_none) {
            let why = format!("`{}` is not installed (apt-get install slurmctld slurmd slurm-client munge)", tools[i]);
            return match std::env::var_os("DAGSIM_REQUIRE_SLURM").is_some_and(|v| v == "1") {
                true => Err(format!("DAGSIM_REQUIRE_SLURM=1 but {why}").into()),
                false => Ok(libtest_mimic::Completion::ignored_with(why)),
            };
        }
        slurm_array_sweep_equals_single_process_sweep(found.into_iter().map(Option::unwrap).collect());
        Ok(libtest_mimic::Completion::Completed)
    });
    libtest_mimic::run(&args, vec![trial]).exit();
}

/// The test itself (panics on failure); `tools` are munged, slurmctld, slurmd, sbatch, sinfo.
fn slurm_array_sweep_equals_single_process_sweep(tools: Vec<PathBuf>) {
    let [munged, slurmctld, slurmd, sbatch, sinfo] = [0, 1, 2, 3, 4].map(|i| tools[i].clone());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["state", "spool", "shards", "munge"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }

    // munge: a fresh key, a private socket; --force because tests may run as root.
    let key = d.join("munge/munge.key");
    let mut bytes = vec![0u8; 1024];
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut bytes).unwrap();
    }
    std::fs::write(&key, &bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = d.join("munge/munge.socket");
    let mut daemons = Daemons(Vec::new());
    daemons.0.push(
        Command::new(&munged)
            .arg("--foreground")
            .arg("--force")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", d.join("munge/munged.pid").display()))
            .arg(format!("--log-file={}", d.join("munge/munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munge/munged.seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "munged did not start: {}",
            log_tail(&d.join("munge/munged.log"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let user = std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| {
        String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap().trim().to_string()
    });
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let conf = d.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=dagsimtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=dagsimnode NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
",
            ctld_port = free_port(),
            d_port = free_port(),
            socket = socket.display(),
            dir = d.display(),
        ),
    )
    .unwrap();
    let env = |c: &mut Command| {
        c.env("SLURM_CONF", &conf);
    };
    let mut ctld = Command::new(&slurmctld);
    env(&mut ctld);
    daemons
        .0
        .push(ctld.args(["-D", "-i", "-f"]).arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let mut sd = Command::new(&slurmd);
    env(&mut sd);
    daemons.0.push(
        sd.args(["-D", "-N", "dagsimnode", "-f"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    loop {
        let mut c = Command::new(&sinfo);
        env(&mut c);
        let out = c.args(["-h", "-o", "%T"]).output().unwrap();
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if state == "idle" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "Slurm did not come up (node state `{state}`)\nslurmctld:\n{}\nslurmd:\n{}",
            log_tail(&d.join("slurmctld.log")),
            log_tail(&d.join("slurmd.log"))
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // The recipe as documented, with this build's binary.
    let sweep = root().join("tests/fixtures/sweep_small.toml");
    let dagsim = PathBuf::from(env!("CARGO_BIN_EXE_dagsim"));
    let mut submit = Command::new(&sbatch);
    env(&mut submit);
    // --time bounds a stuck job; the loop below bounds a stuck sbatch.
    let mut child = submit
        .current_dir(d)
        .args(["--wait", "--array=0-3", "--cpus-per-task=1", "--time=5"])
        .arg(format!(
            "--export=ALL,SWEEP={},OUT_DIR={}/shards,DAGSIM={}",
            sweep.display(),
            d.display(),
            dagsim.display()
        ))
        .arg(root().join("slurm/sweep_array.sbatch"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(360) {
            let _ = child.kill();
            panic!("sbatch --wait did not return in 6 minutes\nslurmctld:\n{}", log_tail(&d.join("slurmctld.log")));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    let job_logs: String = std::fs::read_dir(d)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
        .map(|e| log_tail(&e.path()))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "sbatch failed: {}{}\njob logs:\n{job_logs}\nslurmd:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        log_tail(&d.join("slurmd.log"))
    );
    let parts: Vec<PathBuf> = (0..4).map(|i| d.join(format!("shards/part-{i}.csv"))).collect();
    for p in &parts {
        assert!(p.exists(), "{} missing; job logs:\n{job_logs}", p.display());
    }
    let merged = d.join("merged.csv");
    let status = Command::new(&dagsim)
        .args(["sweep", "merge", "--sweep"])
        .arg(&sweep)
        .args(&parts)
        .arg("-o")
        .arg(&merged)
        .status()
        .unwrap();
    assert!(status.success());
    let single = d.join("single.csv");
    let status = Command::new(&dagsim).arg("--quiet").arg("sweep").arg(&sweep).arg("-o").arg(&single).status().unwrap();
    assert!(status.success());
    let (merged, single) = (std::fs::read_to_string(merged).unwrap(), std::fs::read_to_string(single).unwrap());
    assert_eq!(merged.lines().count(), 13);
    assert_eq!(merged, single);
}
