//! Every `imgseq ...` command line in the README, `docs/`, the model cards and the Python
//! package's README parses with today's flags and subcommands: a renamed flag or a moved
//! command fails here, not in a user's shell. (The figures those commands print are the docs'
//! own claims, measured by their stated commands; this test checks the command lines.)

use crate::Cli;
use clap::Parser;
use std::path::{Path, PathBuf};

/// The documents whose code blocks are checked.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![root.join("README.md"), root.join("python/README.md")];
    for dir in ["docs", "weights"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "md") {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

/// The shell words of `line` up to a comment, pipe, `&&`, `;` or redirection (quotes kept
/// together, `$VAR` left as it is).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, '#' | '|' | ';' | '>' | '&') if cur.is_empty() => break,
            (None, c) if c.is_whitespace() => {
                if started || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if started || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The `imgseq` command lines of a document's fenced code blocks (continuation lines joined;
/// `cargo run ... -- ARGS` counted as `imgseq ARGS`), with their line numbers.
fn command_lines(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut fenced = false;
    // A command continued on the next line (`\`): its first line number and text so far.
    let mut pending: Option<(usize, String)> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            continue;
        }
        let (start, mut joined) = match pending.take() {
            Some((s, j)) => (s, j + " " + line),
            None => (n + 1, line.to_string()),
        };
        if joined.ends_with('\\') {
            joined.pop();
            pending = Some((start, joined));
            continue;
        }
        let w = words(&joined);
        let args = match w.iter().position(|x| x == "--") {
            Some(i)
                if w.first().is_some_and(|c| c == "cargo") && w.iter().any(|x| x == "imgseq") =>
            {
                w[i + 1..].to_vec()
            }
            _ if w.first().is_some_and(|c| c == "imgseq") => w[1..].to_vec(),
            _ => continue,
        };
        out.push((start, args));
    }
    out
}

#[test]
fn every_documented_command_line_parses() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (line, args) in command_lines(&text) {
            checked += 1;
            // A shell variable (`$SLURM_ARRAY_TASK_ID`, `"$SECRET"`) stands for a value: 0.
            let value = |a: &String| {
                if a.starts_with('$') {
                    "0".to_string()
                } else {
                    a.clone()
                }
            };
            let argv = std::iter::once("imgseq".to_string()).chain(args.iter().map(value));
            if let Err(e) = Cli::try_parse_from(argv) {
                use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                    let first = e.to_string().lines().next().unwrap_or_default().to_string();
                    failures.push(format!(
                        "{}:{line}: imgseq {}: {first}",
                        doc.display(),
                        args.join(" ")
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 50,
        "only {checked} documented command lines found"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} documented commands do not parse:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn shell_words_stop_at_comments_and_keep_quotes() {
    assert_eq!(
        words(r#"imgseq serve --token "$SECRET" --model a=b   # comment"#),
        ["imgseq", "serve", "--token", "$SECRET", "--model", "a=b"]
    );
    assert_eq!(
        words("imgseq vq stats t/ | head"),
        ["imgseq", "vq", "stats", "t/"]
    );
    assert_eq!(
        command_lines("```sh\nimgseq vq encode a.png \\\n  -o t.npy\n```\nimgseq prose\n"),
        [(
            2,
            vec![
                "vq".to_string(),
                "encode".into(),
                "a.png".into(),
                "-o".into(),
                "t.npy".into()
            ]
        )]
    );
}
