//! The reference's environment names (issue 20, item 5): a reference `.env` is honoured where
//! the meaning is the same, and what pmm does not use is named in a warning.

use crate::harness::Pmm;
use crate::stub::{Stub, StubResponse};

const UNUSED: &str = "pmm-turn: warning: .env sets PMM_AUTONOMY_INTERVAL, which pmm does not use (docs/reference.md lists the names it reads)\n";

#[test]
fn a_reference_dotenv_chooses_the_adapter_model_and_server() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::Ollama("Hello.".into())]);
    std::fs::write(
        pmm.path(".env"),
        format!(
            "PMM_PROVIDER=dummy\nPMM_OLLAMA_MODEL=mymodel\nOLLAMA_BASE_URL={}\nPMM_AUTONOMY_INTERVAL=5\n",
            stub.url()
        ),
    )
    .unwrap();
    // PMM_PROVIDER stands for PMM_ADAPTER.
    let r = pmm.run("pmm-turn", &["--text", "hi"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "Echo: hi\nCOMMIT: note this item\n");
    assert_eq!(r.stderr, UNUSED);
    // The Ollama model and server.
    let r = pmm.run("pmm-turn", &["--text", "--adapter", "ollama", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "Hello.\n");
    assert_eq!(stub.requests()[0].body["model"], "mymodel");
    // The environment wins over the .env, and PMM_MODEL over the reference's model names.
    let r = pmm
        .cmd("pmm-turn")
        .args(["--text", "--adapter", "ollama", "again"])
        .env("PMM_MODEL", "other")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    assert_eq!(stub.requests()[1].body["model"], "other");
}

#[test]
fn an_openai_model_name_and_an_unknown_provider() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::OpenAi("Hi.".into())]);
    std::fs::write(
        pmm.path(".env"),
        format!(
            "PMM_OPENAI_MODEL=gpt-test\nOPENAI_MODEL=not-this\nPMM_PROVIDER=claude\nOPENAI_API_KEY=k\nOPENAI_BASE_URL={}/v1\n",
            stub.url()
        ),
    )
    .unwrap();
    let r = pmm.run("pmm-turn", &["--text", "--adapter", "openai", "hi"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(stub.requests()[0].body["model"], "gpt-test");
    assert_eq!(
        r.stderr,
        "pmm-turn: warning: PMM_PROVIDER=claude is not an adapter pmm has (openai, ollama, dummy); it is ignored\n"
    );
}
