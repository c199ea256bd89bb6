//! Network escapes: reaching host listeners over TCP (IPv4, IPv6, bash's /dev/tcp), UDP,
//! host unix sockets (pathname, abstract, datagram), creating netlink and raw sockets,
//! and offering a listener the host could connect to. The verdict is the host
//! listener's: did it get a connection or a datagram?

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use sandbox_tests::*;

/// A Python probe: `body` then `print("PROBE-DONE")`.
fn probe_py(body: &str) -> String {
    format!("{body}\nprint({DONE:?})\n")
}

/// Connects (stream) or sends (datagram) to `argv[2]` with family `argv[1]`.
const PY_REACH: &str = r#"
import socket, sys
family, kind, addr = sys.argv[1], sys.argv[2], sys.argv[3]
fam = {"4": socket.AF_INET, "6": socket.AF_INET6, "unix": socket.AF_UNIX}[family]
typ = socket.SOCK_DGRAM if kind == "dgram" else socket.SOCK_STREAM
if fam == socket.AF_UNIX:
    target = "\0" + addr[1:] if addr.startswith("@") else addr
else:
    host, port = addr.rsplit(":", 1)
    target = (host.strip("[]"), int(port))
try:
    s = socket.socket(fam, typ)
    s.settimeout(3)
    if typ == socket.SOCK_DGRAM:
        s.sendto(b"escaped", target)
    else:
        s.connect(target)
        s.sendall(b"escaped")
    print("reached", addr)
except OSError as e:
    print("blocked:", e)
"#;

fn reach(backend: &str, fx: &Fixture, family: &str, kind: &str, addr: &str) -> Ran {
    fx.chitti(backend)
        .py(&probe_py(PY_REACH), &[family, kind, addr])
}

#[backends]
fn escape_tcp_connect_host_listener_ipv4(backend: &str) {
    let fx = Fixture::new();
    let trap = TcpTrap::v4();
    let ran = reach(
        backend,
        &fx,
        "4",
        "stream",
        &format!("127.0.0.1:{}", trap.port),
    );
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (TCP connect to a host listener on 127.0.0.1): {n} connection(s)\n{ran}"
    );
}

#[backends]
fn escape_tcp_connect_host_listener_ipv6(backend: &str) {
    let fx = Fixture::new();
    let trap = TcpTrap::v6();
    let ran = reach(backend, &fx, "6", "stream", &format!("[::1]:{}", trap.port));
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (TCP connect to a host listener on [::1]): {n} connection(s)\n{ran}"
    );
}

#[backends]
fn escape_tcp_connect_host_listener_via_bash_dev_tcp(backend: &str) {
    let fx = Fixture::new();
    let trap = TcpTrap::v4();
    let ran = fx.chitti(backend).bash(&probe(&format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{p} && echo escaped >&3) 2>&1; (echo escaped > /dev/tcp/localhost/{p}) 2>&1",
        p = trap.port
    )));
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (bash /dev/tcp to a host listener): {n} connection(s)\n{ran}"
    );
}

#[backends]
fn escape_udp_send_to_host_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UdpTrap::v4();
    let ran = reach(
        backend,
        &fx,
        "4",
        "dgram",
        &format!("127.0.0.1:{}", trap.port),
    );
    ran.assert_probe_ran();
    let got = trap.datagrams();
    assert!(
        got.is_empty(),
        "ESCAPE (UDP to a host socket): received {got:?}\n{ran}"
    );
}

#[backends]
fn escape_unix_connect_host_socket_outside_workspace(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixTrap::path(&fx.outside("host.sock"));
    let ran = reach(backend, &fx, "unix", "stream", &trap.address);
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (connect to a host unix socket outside the workspace): {n} connection(s)\n{ran}"
    );
}

/// A host service's socket that happens to live in the workspace (a dev server, an IDE).
#[backends]
fn escape_unix_connect_host_socket_inside_workspace(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixTrap::path(&fx.ws("ide.sock"));
    let ran = reach(backend, &fx, "unix", "stream", &trap.address);
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (connect to a host unix socket in the workspace): {n} connection(s)\n{ran}"
    );
}

#[backends]
fn escape_unix_connect_host_abstract_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixTrap::abstract_name(&marker("abstract"));
    let ran = reach(backend, &fx, "unix", "stream", &trap.address);
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (connect to a host abstract unix socket): {n} connection(s)\n{ran}"
    );
}

#[backends]
fn escape_unix_dgram_sendto_host_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixDgramTrap::path(&fx.outside("log.sock"));
    let ran = reach(backend, &fx, "unix", "dgram", &trap.address);
    ran.assert_probe_ran();
    let got = trap.datagrams();
    assert!(
        got.is_empty(),
        "ESCAPE (unix datagram sendto a host socket): received {got:?}\n{ran}"
    );
}

#[backends]
fn escape_unix_dgram_sendto_host_abstract_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixDgramTrap::abstract_name(&marker("abstract-dgram"));
    let ran = reach(backend, &fx, "unix", "dgram", &trap.address);
    ran.assert_probe_ran();
    let got = trap.datagrams();
    assert!(
        got.is_empty(),
        "ESCAPE (unix datagram sendto a host abstract socket): received {got:?}\n{ran}"
    );
}

/// socketpair() is allowed; a datagram socketpair can still address any socket per message.
const PY_SOCKETPAIR_SENDTO: &str = r#"
import socket, sys
addr = sys.argv[1]
target = "\0" + addr[1:] if addr.startswith("@") else addr
for typ, name in ((socket.SOCK_DGRAM, "dgram"), (socket.SOCK_SEQPACKET, "seqpacket"), (socket.SOCK_STREAM, "stream")):
    try:
        a, b = socket.socketpair(socket.AF_UNIX, typ)
        a.sendto(b"escaped-" + name.encode(), target)
        print("sent through a", name, "socketpair")
    except OSError as e:
        print(name, "blocked:", e)
"#;

#[backends]
fn escape_unix_dgram_socketpair_sendto_host_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixDgramTrap::path(&fx.outside("notify.sock"));
    let ran = fx
        .chitti(backend)
        .py(&probe_py(PY_SOCKETPAIR_SENDTO), &[&trap.address]);
    ran.assert_probe_ran();
    let got = trap.datagrams();
    assert!(
        got.is_empty(),
        "ESCAPE (socketpair + sendto a host datagram socket): received {got:?}\n{ran}"
    );
}

#[backends]
fn escape_netlink_socket_creation(backend: &str) {
    let fx = Fixture::new();
    let script = probe_py(
        r#"
import socket
for proto, name in ((0, "NETLINK_ROUTE"), (9, "NETLINK_AUDIT"), (15, "NETLINK_KOBJECT_UEVENT"), (4, "NETLINK_SOCK_DIAG")):
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
        s.bind((0, 0))
        print("CREATED", name)
    except OSError as e:
        print("denied", name, e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert!(
        !ran.stdout_str().contains("CREATED"),
        "ESCAPE (netlink socket creation with the network off)\n{ran}"
    );
}

#[backends]
fn escape_raw_and_packet_socket_creation(backend: &str) {
    let fx = Fixture::new();
    let script = probe_py(
        r#"
import socket
for fam, typ, proto, name in (
    (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP, "AF_INET raw icmp"),
    (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW, "AF_INET raw"),
    (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6, "AF_INET6 raw"),
    (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP, "ping socket"),
    (socket.AF_PACKET, socket.SOCK_RAW, 0x0300, "AF_PACKET"),
    (socket.AF_UNIX, socket.SOCK_RAW, 0, "AF_UNIX raw"),
):
    try:
        socket.socket(fam, typ, proto)
        print("CREATED", name)
    except OSError as e:
        print("denied", name, e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert!(
        !ran.stdout_str().contains("CREATED"),
        "ESCAPE (raw/packet socket creation with the network off)\n{ran}"
    );
}

/// The sandbox listens on a loopback TCP port; a host client must not reach it.
#[backends]
fn escape_tcp_listen_reachable_from_host(backend: &str) {
    let fx = Fixture::new();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let script = probe_py(
        r#"
import os, socket, sys, time
port = int(sys.argv[1])
keep = []
for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::1")):
    try:
        s = socket.socket(fam)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port)); s.listen(8); keep.append(s)
        print("listening on", host)
    except OSError as e:
        print("denied", host, e)
open("ready", "w").close()
deadline = time.time() + 30
while not os.path.exists("host-done") and time.time() < deadline:
    time.sleep(0.02)
"#,
    );
    let running = fx
        .chitti(backend)
        .spawn(&[PYTHON, "-c", &script, &port.to_string()]);
    assert!(
        wait_until(Duration::from_secs(60), || exists(&fx.ws("ready"))),
        "the listening probe never got ready"
    );
    let mut reached = Vec::new();
    for addr in ["127.0.0.1", "[::1]"] {
        let sa: SocketAddr = format!("{addr}:{port}").parse().unwrap();
        if TcpStream::connect_timeout(&sa, Duration::from_secs(1)).is_ok() {
            reached.push(addr);
        }
    }
    write(&fx.ws("host-done"), "");
    let ran = running.wait();
    ran.assert_probe_ran();
    assert!(
        reached.is_empty(),
        "ESCAPE (a sandboxed TCP listener is reachable from the host on {reached:?})\n{ran}"
    );
}

/// The sandbox binds unix sockets (in the workspace, and an abstract name) a host client
/// could mistake for a real service; the host must not reach them.
#[backends]
fn escape_unix_bind_reachable_from_host(backend: &str) {
    use std::os::linux::net::SocketAddrExt;
    let fx = Fixture::new();
    let name = marker("squat");
    let script = probe_py(
        r#"
import os, socket, sys, time
keep = []
for addr in ("squat.sock", "\0" + sys.argv[1]):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(addr); s.listen(8); keep.append(s)
        print("listening on", repr(addr))
    except OSError as e:
        print("denied", repr(addr), e)
open("ready", "w").close()
deadline = time.time() + 30
while not os.path.exists("host-done") and time.time() < deadline:
    time.sleep(0.02)
"#,
    );
    let running = fx.chitti(backend).spawn(&[PYTHON, "-c", &script, &name]);
    assert!(
        wait_until(Duration::from_secs(60), || exists(&fx.ws("ready"))),
        "the listening probe never got ready"
    );
    let path_ok = std::os::unix::net::UnixStream::connect(fx.ws("squat.sock")).is_ok();
    let abs = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let abstract_ok = std::os::unix::net::UnixStream::connect_addr(&abs).is_ok();
    write(&fx.ws("host-done"), "");
    let ran = running.wait();
    ran.assert_probe_ran();
    assert!(
        !path_ok,
        "ESCAPE (a sandboxed unix listener in the workspace is reachable from the host)\n{ran}"
    );
    assert!(
        !abstract_ok,
        "ESCAPE (a sandboxed abstract unix listener is reachable from the host)\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// Network on: TCP/UDP work, host unix sockets stay out of reach
// ---------------------------------------------------------------------------------------

#[backends]
fn escape_network_on_unix_connect_host_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixTrap::path(&fx.outside("docker.sock"));
    let ran = fx
        .chitti(backend)
        .network_on()
        .py(&probe_py(PY_REACH), &["unix", "stream", &trap.address]);
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (--network on: connect to a host unix socket): {n} connection(s)\n{ran}"
    );
}

#[backends]
fn escape_network_on_unix_connect_host_abstract_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixTrap::abstract_name(&marker("abstract-net-on"));
    let ran = fx
        .chitti(backend)
        .network_on()
        .py(&probe_py(PY_REACH), &["unix", "stream", &trap.address]);
    ran.assert_probe_ran();
    let n = trap.connections();
    assert_eq!(
        n, 0,
        "ESCAPE (--network on: connect to a host abstract socket): {n} connection(s)\n{ran}"
    );
}

/// README: with network on "socket(AF_UNIX) is still denied, so docker.sock, ssh-agent or
/// the X server stay out of reach". socketpair() is not socket().
#[backends]
fn escape_network_on_unix_dgram_socketpair_sendto_host_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixDgramTrap::path(&fx.outside("journal.sock"));
    let ran = fx
        .chitti(backend)
        .network_on()
        .py(&probe_py(PY_SOCKETPAIR_SENDTO), &[&trap.address]);
    ran.assert_probe_ran();
    let got = trap.datagrams();
    assert!(
        got.is_empty(),
        "ESCAPE (--network on: socketpair(AF_UNIX, SOCK_DGRAM) + sendto a host datagram socket): \
         received {:?}\n{ran}",
        got.iter()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .collect::<Vec<_>>()
    );
}

#[backends]
fn escape_network_on_unix_dgram_socketpair_sendto_host_abstract_socket(backend: &str) {
    let fx = Fixture::new();
    let trap = UnixDgramTrap::abstract_name(&marker("abstract-dgram-net-on"));
    let ran = fx
        .chitti(backend)
        .network_on()
        .py(&probe_py(PY_SOCKETPAIR_SENDTO), &[&trap.address]);
    ran.assert_probe_ran();
    let got = trap.datagrams();
    assert!(
        got.is_empty(),
        "ESCAPE (--network on: socketpair(AF_UNIX, SOCK_DGRAM) + sendto a host abstract socket): \
         received {:?}\n{ran}",
        got.iter()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .collect::<Vec<_>>()
    );
}

/// Positive control: with --network on, TCP to a host listener works (and so the traps
/// above would see an escape).
#[backends]
fn control_network_on_tcp_and_udp_reach_host(backend: &str) {
    let fx = Fixture::new();
    let tcp = TcpTrap::v4();
    let ran = fx.chitti(backend).network_on().py(
        &probe_py(PY_REACH),
        &["4", "stream", &format!("127.0.0.1:{}", tcp.port)],
    );
    ran.assert_probe_ran();
    assert_eq!(
        tcp.connections(),
        1,
        "--network on must let TCP reach the host\n{ran}"
    );
    let udp = UdpTrap::v4();
    let ran = fx.chitti(backend).network_on().py(
        &probe_py(PY_REACH),
        &["4", "dgram", &format!("127.0.0.1:{}", udp.port)],
    );
    ran.assert_probe_ran();
    assert_eq!(
        udp.datagrams(),
        vec![b"escaped".to_vec()],
        "--network on must let UDP reach the host\n{ran}"
    );
}
