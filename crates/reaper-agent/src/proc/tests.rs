//! Reading the proc filesystem.

use super::*;

#[test]
fn stat_fields_count_from_the_last_parenthesis() {
    let line = b"4242 (sleep) S 1 4242 4242 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 987654 2000 50 18446744073709551615";
    assert_eq!(
        parse_stat(line),
        Some(ProcStat {
            state: b'S',
            ppid: 1,
            tty_nr: 0,
            flags: 4194304,
            threads: 1,
            start_ticks: 987654,
            java: false,
        })
    );
    let odd = b"7 (a) (b c) Z 1 7 7 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
    let s = parse_stat(odd).unwrap();
    assert_eq!((s.state, s.start_ticks), (b'Z', 55));
    assert!(s.ended());
    assert_eq!(parse_stat(b"7 (x) S 1 2"), None);
    let leader = b"9 (java) Z 1 9 9 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 31 0 55 0 0";
    let l = parse_stat(leader).unwrap();
    assert_eq!(l.threads, 31);
    assert!(
        !l.ended(),
        "a zombie leader with live threads is a live process"
    );
    let tty = b"77 (bash) S 70 77 77 34816 77 4194560 100 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
    let t = parse_stat(tty).unwrap();
    assert!(t.tty() && !s.tty());
    assert_eq!((t.ppid, t.flags, t.start_ticks), (70, 4194560, 55));
    let kthread = b"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 1 0 0 20 0 1 0 24 0 0";
    assert!(parse_stat(kthread).unwrap().kernel_thread());
    assert_eq!(parse_stat(b"garbage"), None);
}

#[test]
fn the_real_proc_reads() {
    let mut p = ProcFs::new("/proc");
    let me = std::process::id() as i32;
    assert!(p.pids().unwrap().contains(&me));
    assert_eq!(p.cwd(me).unwrap(), std::env::current_dir().unwrap());
    let s = p.stat(me).unwrap();
    assert!(!s.ended() && !s.kernel_thread());
    assert_eq!(p.self_pid(), Some(me));
    let boot = p.boot_time().unwrap();
    assert!(boot > 1_000_000_000);
    assert!(p.clock_ticks() >= 1);
    assert!(p.capabilities().is_some());
    assert_eq!(p.cwd(i32::MAX).unwrap_err().kind(), io::ErrorKind::NotFound);
    let argv0 = std::env::args().next().unwrap();
    let cmd = p.cmdline(me).unwrap();
    assert_eq!(cmd.split(|b| *b == 0).next(), Some(argv0.as_bytes()));
    assert_eq!(
        p.cmdline(i32::MAX).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn capabilities_and_hidepid() {
    let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000080004\n";
    let c = parse_cap_eff(status).unwrap();
    assert!(has(c, CAP_SYS_PTRACE) && has(c, CAP_DAC_READ_SEARCH));
    assert!(!has(
        parse_cap_eff("CapEff:\t0000000000000004").unwrap(),
        CAP_SYS_PTRACE
    ));
    let mi = "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n\
              99 22 0:50 / /proc rw,relatime - proc proc rw,hidepid=invisible\n\
              23 1 0:22 / /sys rw - sysfs sysfs rw,hidepid=2\n";
    assert_eq!(
        hidepid(mi, Path::new("/proc")).as_deref(),
        Some("invisible")
    );
    assert_eq!(hidepid(mi, Path::new("/sys")), None);
    let plain = "22 1 0:21 / /proc rw shared:12 - proc proc rw,hidepid=noaccess\n";
    assert_eq!(hidepid(plain, Path::new("/proc")), None);
}

#[test]
fn a_jvm_is_known_by_its_command_name() {
    let java = b"9 (java) S 1 9 9 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 31 0 55 0 0";
    assert!(parse_stat(java).unwrap().java);
    for other in [
        &b"9 (javac) S 1 9 9 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 55 0 0"[..],
        b"9 (sh -c (java)) S 1 9 9 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 55 0 0",
        b"9 (ja) S 1 9 9 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 55 0 0",
    ] {
        assert!(!parse_stat(other).unwrap().java, "{other:?}");
    }
}

#[test]
fn the_real_proc_names_executables_and_forks() {
    let mut p = ProcFs::new("/proc");
    let me = std::process::id() as i32;
    assert_eq!(p.exe(me).unwrap(), std::env::current_exe().unwrap());
    let mut copy = p.fork().unwrap();
    assert_eq!(copy.stat(me).unwrap(), p.stat(me).unwrap());
    assert_eq!(p.exe(i32::MAX).unwrap_err().kind(), io::ErrorKind::NotFound);
}
