//! The reconstruction benchmark (`imgseq eval`, docs/evaluation.md): the FID network as the
//! published tokenizer tables use it ([`inception`]: pytorch-fid's Inception-v3 from the
//! user's weights file), the protocols ([`protocol`]), and the resumable, job-array
//! evaluation of any tokenizer ([`job`], [`state`]).
//!
//! Not a tokenizer family and not training: any evaluator (the CLI, the service, the Python
//! package) reaches it without the trainer; it needs the core, the kernels and the
//! checkpoint reader only.

pub mod inception;
pub mod job;
pub mod protocol;
pub mod state;

use candle_core::{Device, Tensor};
use imgseq_core::Result;
use std::collections::HashMap;
use std::path::Path;

/// Every tensor of a safetensors file (by its extension) or of a torch checkpoint's state
/// dict (read without executing its pickle).
pub fn read_tensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let safetensors = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
    if safetensors {
        imgseq_core::weights::load_tensors(path, &Device::Cpu)
    } else {
        let sd = imgseq_torch::read_state_dict(path, &Device::Cpu)?;
        Ok(sd.into_iter().map(|(k, t)| (k, t.tensor)).collect())
    }
}

/// 8-bit pictures of one size as a (b, 3, h, w) f32 tensor in [0, 1] (`ToTensor`'s values).
pub fn pictures_01(imgs: &[image::RgbImage]) -> Result<Tensor> {
    let Some(first) = imgs.first() else {
        return Err(imgseq_core::Error::invalid("no pictures"));
    };
    let (w, h) = first.dimensions();
    if imgs.iter().any(|i| i.dimensions() != (w, h)) {
        return Err(imgseq_core::Error::invalid(
            "pictures of different sizes in one batch",
        ));
    }
    let v: Vec<f32> = imgs
        .iter()
        .flat_map(|i| i.as_raw().iter().map(|&p| p as f32 / 255.0))
        .collect();
    Ok(
        Tensor::from_vec(v, (imgs.len(), h as usize, w as usize, 3), &Device::Cpu)?
            .permute((0, 3, 1, 2))?
            .contiguous()?,
    )
}
