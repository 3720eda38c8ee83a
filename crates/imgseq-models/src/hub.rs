//! Models named on the Hugging Face Hub (`hf:ORG/NAME[@REVISION][/PATH]`, or a plain
//! `ORG/NAME` where no such local path exists): the files a model needs, fetched into the
//! shared cache by [`imgseq_hub`], then opened as a local folder.
//!
//! Which files: a source naming a file takes it (and the configs beside it); a folder takes
//! its configs (`config.json`, `*_config.json`, `*.yaml`) and its weights — the diffusers or
//! transformers file name when there is one, else its one safetensors, `.ckpt`, `.pt` or
//! `.pth` file — and asks for a file name when it holds several. A folder of paired
//! TorchScript archives (`encoder.jit` + `decoder.jit`, NVIDIA's Cosmos releases) takes both,
//! also when the source names one of them.

use imgseq_core::{Error, Result};
use imgseq_hub::{Hub, HubSource};
use std::path::PathBuf;

/// Weights extensions in the order a folder's file is chosen.
const WEIGHTS: [&str; 4] = [".safetensors", ".ckpt", ".pt", ".pth"];

/// Weights file names that a folder's own weights go by (diffusers, transformers, imgseq).
const KNOWN_WEIGHTS: [&str; 2] = ["diffusion_pytorch_model.safetensors", "model.safetensors"];

/// TorchScript archives released as a pair: the encoder's and the decoder's (their
/// `autoencoder.jit` holds the same weights and is left out).
const PAIRED: [&str; 2] = ["encoder.jit", "decoder.jit"];

/// Config files the loaders look for beside weights (`config.json`, `NAME_config.json`,
/// `model.yaml`, `NAME_model.yaml`, any yaml).
fn is_config(name: &str) -> bool {
    name == "config.json"
        || name.ends_with("_config.json")
        || name.ends_with(".yaml")
        || name.ends_with(".yml")
}

/// The files of a folder (names relative to it) a tokenizer needs: its configs and `file` when
/// the source names one, else its one weights file; several candidates of the first extension
/// present are an error (`Err`: the candidates, for the message).
pub fn wanted(
    names: &[String],
    file: Option<&str>,
) -> std::result::Result<Vec<String>, Vec<String>> {
    let top: Vec<&String> = names.iter().filter(|n| !n.contains('/')).collect();
    let mut out: Vec<String> = top
        .iter()
        .filter(|n| is_config(n))
        .map(|n| n.to_string())
        .collect();
    let paired = PAIRED.iter().all(|p| top.iter().any(|n| n == p));
    if paired && file.is_none_or(|f| PAIRED.contains(&f)) {
        out.extend(PAIRED.iter().map(|p| p.to_string()));
        return Ok(out);
    }
    if let Some(f) = file {
        if !out.iter().any(|o| o == f) {
            out.push(f.to_string());
        }
        return Ok(out);
    }
    if let Some(k) = KNOWN_WEIGHTS.iter().find(|k| top.iter().any(|n| n == k)) {
        out.push(k.to_string());
        return Ok(out);
    }
    for ext in WEIGHTS {
        let w: Vec<&String> = top.iter().copied().filter(|n| n.ends_with(ext)).collect();
        match w.len() {
            0 => continue,
            1 => {
                out.push(w[0].clone());
                return Ok(out);
            }
            _ => return Err(w.into_iter().cloned().collect()),
        }
    }
    Err(Vec::new())
}

/// The Hub model a model argument names: a [`crate::catalogue`] name or a plain `ORG/NAME`
/// where no such local path exists, or any `hf:` source (`Err`: an `hf:` source that does not
/// parse); `None` for local files.
pub fn source_of(source: &std::path::Path) -> Option<Result<HubSource>> {
    let s = source.to_str()?;
    match catalogue_entry(source).and_then(|e| crate::catalogue::resolve(e.name)) {
        Some(hf) => Some(HubSource::parse(hf)),
        None => HubSource::from_arg(s),
    }
}

/// The [`crate::catalogue`] entry a model argument names (a local path of that name wins).
pub fn catalogue_entry(source: &std::path::Path) -> Option<&'static crate::catalogue::Entry> {
    crate::catalogue::entry(source.to_str()?).filter(|_| !source.exists())
}

/// Whether a model argument names the Hub rather than local files ([`source_of`]).
pub fn names_hub(source: &std::path::Path) -> bool {
    source_of(source).is_some()
}

/// Fetches (or finds in the cache) what `src` names; gives the local file or folder and the
/// source as recorded — `hf:ORG/NAME@COMMIT[/PATH]`, the revision resolved.
pub fn fetch(src: &HubSource) -> Result<(PathBuf, String)> {
    let hub = Hub::from_env()?;
    let several = std::cell::RefCell::new(Vec::new());
    let want = |names: &[String], file: Option<&str>| match wanted(names, file) {
        Ok(w) => w,
        Err(c) => {
            *several.borrow_mut() = c;
            Vec::new()
        }
    };
    let snap = hub.snapshot(src, &want).map_err(|e| {
        let c = several.borrow();
        if c.is_empty() {
            e
        } else {
            Error::invalid(format!(
                "{src}: several weights files ({}); name one, e.g. {src}/{}",
                c.join(", "),
                c[0]
            ))
        }
    })?;
    Ok((snap.path, src.at(&snap.commit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted_dir(names: &[String]) -> std::result::Result<Vec<String>, Vec<String>> {
        wanted(names, None)
    }

    fn v(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_folder_of_paired_torchscript_archives_gives_both() {
        let names = v(&["autoencoder.jit", "decoder.jit", "encoder.jit", "README.md"]);
        let both = Ok(v(&["encoder.jit", "decoder.jit"]));
        assert_eq!(wanted_dir(&names), both);
        assert_eq!(wanted(&names, Some("encoder.jit")), both);
        assert_eq!(
            wanted(&names, Some("autoencoder.jit")),
            Ok(v(&["autoencoder.jit"]))
        );
    }

    #[test]
    fn a_folder_gives_its_configs_and_its_one_weights_file() {
        assert_eq!(
            wanted_dir(&v(&[
                "config.json",
                "diffusion_pytorch_model.safetensors",
                "diffusion_pytorch_model.bin",
                "README.md"
            ])),
            Ok(v(&["config.json", "diffusion_pytorch_model.safetensors"]))
        );
        assert_eq!(
            wanted_dir(&v(&["model.yaml", "last.ckpt", "sub/x.safetensors"])),
            Ok(v(&["model.yaml", "last.ckpt"]))
        );
        assert_eq!(wanted_dir(&v(&["a.pt", "b.pt"])), Err(v(&["a.pt", "b.pt"])));
        assert_eq!(wanted_dir(&v(&["README.md"])), Err(vec![]));
        // A named file brings the configs beside it, not the other weights.
        assert_eq!(
            wanted(&v(&["config.json", "a.pt", "b.pt"]), Some("b.pt")),
            Ok(v(&["config.json", "b.pt"]))
        );
    }
}
