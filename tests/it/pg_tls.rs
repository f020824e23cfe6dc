//! Issue 44, N17 and N14: a self-signed server certificate given as its own `sslrootcert`
//! (libpq's usual set-up, a CA certificate presented by the server) is accepted as libpq
//! accepts it, its name still checked under verify-full; and `sslrootcert` is read with a
//! size limit (`/dev/zero` is refused at once, not read until memory runs out).

use crate::harness::Pmm;
use crate::pg::openssl;
use std::path::{Path, PathBuf};

/// A self-signed certificate `NAME.pem` (CA:TRUE, as `openssl req -x509` makes it) for the
/// DNS name `cn`, with its key `NAME.key`.
fn self_signed(dir: &Path, name: &str, cn: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            &format!("subjectAltName=DNS:{cn}"),
        ],
    );
}

#[test]
fn a_self_signed_server_certificate_is_its_own_root() {
    if !crate::harness::tool_or_skip("openssl", "the PostgreSQL TLS test's certificates") {
        return;
    }
    let certs = tempfile::Builder::new()
        .prefix("pmm-pg-pinned-")
        .tempdir_in("/tmp")
        .unwrap();
    let d = certs.path();
    self_signed(d, "server", "localhost");
    self_signed(d, "other", "localhost");
    let Some((server, db)) = crate::pg::tls_server(d) else {
        return;
    };
    let url = |host: &str, mode: &str, root: &Path| {
        format!(
            "postgres://postgres@{host}:{}/{db}?sslmode={mode}&sslrootcert={}&connect_timeout=5",
            server.port(),
            root.display()
        )
    };
    let append = |u: String| {
        let mut pmm = Pmm::new();
        pmm.db = PathBuf::from(u);
        pmm.cache = Some(pmm.path("cache"));
        pmm.run(
            "pmm-append",
            &["--kind", "user_message", "--content", "over TLS"],
            "",
        )
    };
    let own = d.join("server.pem");
    for (host, mode) in [("localhost", "verify-full"), ("127.0.0.1", "verify-ca")] {
        let r = append(url(host, mode, &own));
        assert_eq!(
            r.code, 0,
            "{mode} with the certificate as its own root: {r:?}"
        );
    }
    // Its name is still checked, and another self-signed certificate is no root of it.
    let r = append(url("127.0.0.1", "verify-full", &own));
    assert_eq!(r.code, 2, "{r:?}");
    for mode in ["verify-full", "verify-ca"] {
        let r = append(url("localhost", mode, &d.join("other.pem")));
        assert_eq!(r.code, 2, "{mode} with a stranger's certificate: {r:?}");
    }
    // N14: an endless sslrootcert is refused after the small-file limit.
    let r = append(url("localhost", "verify-ca", Path::new("/dev/zero")));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("sslrootcert /dev/zero"), "{r:?}");
    let rows = server.psql(&db, "SELECT count(*) FROM events").unwrap();
    assert_eq!(rows.trim(), "2", "only the two verified connections wrote");
}
