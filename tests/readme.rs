//! The README's "Using it" snippet, compiled and run: the body of `readme_snippet` between the
//! `README BEGIN` / `README END` markers is the README's code block, line for line
//! (`readme_is_this_test`), so the two cannot drift apart.
#![allow(missing_docs)]

#[test]
fn readme_snippet() -> Result<(), Box<dyn std::error::Error>> {
    // README BEGIN
    use rpma::mock::{ConnReq, Device, Ep, MockFabric, Peer};
    use rpma::{op, CompletionFlags, ConnEvent, ContextType, FlushType, MrRemote, Usage};

    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
    let ep = Ep::listen(&peer, "127.0.0.1", "7204")?;
    let target = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let client = ConnReq::new(&peer, "127.0.0.1", "7204", None)?.connect(None)?;
    let server = ep.next_conn_req(None)?.connect(Some(&target.descriptor()))?;
    assert_eq!(client.next_event()?, ConnEvent::Established);
    assert_eq!(server.next_event()?, ConnEvent::Established);
    let remote = MrRemote::from_descriptor(client.private_data())?;

    // No peer can reach a WRITE_SRC region: it can be filled in place.
    let mut src = peer.alloc_mr(4096, Usage::WRITE_SRC)?;
    src.as_mut_slice()?[..10].copy_from_slice(b"log record");
    client.write(remote.at(0), src.slice(0..10)).flags(CompletionFlags::ON_ERROR).post()?;
    // An operation is a value (rpma::op), posted by the connection; the line above is the
    // same thing written from the connection.
    client.post(op::flush(remote.slice(0..10), FlushType::Visibility).context(2))?;
    // Sleeps until the flush's completion (at most 5 s).
    let wc = client.cq().wait_next(Some(std::time::Duration::from_secs(5)))?;
    assert_eq!((wc.wr_id(), wc.is_success()), (2, true));
    // A peer may write `target` at any time: its bytes are read by copy.
    assert_eq!(target.to_vec(0, 10)?, b"log record");
    // README END
    Ok(())
}

/// The README's block is the snippet above (indentation removed).
#[test]
fn readme_is_this_test() {
    let readme = include_str!("../README.md");
    let block = readme
        .split_once("## Using it")
        .and_then(|(_, rest)| rest.split_once("```rust\n"))
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .map(|(code, _)| code)
        .expect("README.md has a ```rust block under \"## Using it\"");
    let me = include_str!("readme.rs");
    let begin = me.find("// README BEGIN\n").expect("begin marker") + "// README BEGIN\n".len();
    let end = me.find("    // README END\n").expect("end marker");
    let snippet: String =
        me[begin..end].lines().map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l))).collect();
    assert_eq!(block, snippet, "README.md's \"Using it\" block differs from tests/readme.rs");
}

/// Each dependency line of the README and of the crate docs of `rpma` and `rpma-log` names a
/// crate where it says: a `path` below the checkout (`../rpma-rs`) holds a package of that name.
/// A `git` line needs the workspace's `repository`, which names none while no public repository
/// exists (a made-up URL would send users nowhere).
#[test]
fn dependency_lines_name_the_crates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = include_str!("../Cargo.toml");
    let repository = manifest.lines().find_map(|l| l.strip_prefix("repository = \"")).and_then(|l| l.strip_suffix('"'));
    let mut lines = 0;
    for (file, text) in [
        ("README.md", include_str!("../README.md")),
        ("src/lib.rs", include_str!("../src/lib.rs")),
        ("crates/rpma-log/src/lib.rs", include_str!("../crates/rpma-log/src/lib.rs")),
    ] {
        for line in text.lines().map(|l| l.trim_start_matches("//!").trim()) {
            let Some((name, spec)) = line.split_once(" = { ") else { continue };
            if !name.starts_with("rpma") {
                continue;
            }
            lines += 1;
            let value = |key: &str| {
                spec.split_once(&format!("{key} = \""))
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(value, _)| value)
            };
            if let Some(path) = value("path") {
                let below = path.strip_prefix("../rpma-rs").unwrap_or_else(|| panic!("{file}: {line}"));
                let dir = root.join(below.trim_start_matches('/'));
                let package = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
                assert!(
                    package.contains(&format!("\nname = \"{name}\"\n")),
                    "{file}: {line}: no package {name} in {dir:?}"
                );
            } else {
                let repository = repository.unwrap_or_else(|| panic!("{file}: {line}: Cargo.toml names no repository"));
                assert_eq!(value("git"), Some(repository), "{file}: {line}");
            }
        }
    }
    assert!(lines >= 6, "only {lines} dependency lines found");
}
