//! Released tokenizers by short name (`--model llamagen-vq16`): where they are on the Hub, what
//! they make, their licence and their published reconstruction figures with the source.
//!
//! `imgseq models` and Python's `imgseq.models()` print this table. A name is opened as its
//! Hub source ([`resolve`]) when no local path of that name exists.

use serde::Serialize;

/// One released tokenizer.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The short name `--model` takes.
    pub name: &'static str,
    /// Its Hub source (`hf:ORG/NAME[/PATH]`), or for weights published outside the Hub the
    /// `https://` page they are downloaded from (such a name is not opened: it says where to
    /// get the files).
    pub source: &'static str,
    /// The config a checkpoint that ships without one is read with: a preset name
    /// (`--config NAME`), from the family's published config file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<&'static str>,
    /// The loader's family name.
    pub family: &'static str,
    /// What one image becomes, at the input side given.
    pub tokens: &'static str,
    pub licence: &'static str,
    /// Downloads need an account that accepted the licence (and `HF_TOKEN`).
    pub gated: bool,
    /// Published reconstruction figures, as their source states them.
    pub published: Option<&'static str>,
    /// Where the figures come from.
    pub figures_from: Option<&'static str>,
}

/// The catalogue, discrete tokenizers first.
pub static CATALOGUE: &[Entry] = &[
    Entry {
        name: "llamagen-vq16",
        source: "hf:FoundationVision/LlamaGen/vq_ds16_c2i.pt",
        config: None,
        family: "llamagen",
        tokens: "16x16 codes of 16,384 at 256² (24x24 at 384²)",
        licence: "MIT",
        gated: false,
        published: Some("ImageNet val 256²: rFID 2.19, PSNR 20.79 dB, SSIM 0.675"),
        figures_from: Some("LlamaGen paper (arXiv 2406.06525), Table 2"),
    },
    Entry {
        name: "llamagen-vq8",
        source: "hf:FoundationVision/LlamaGen/vq_ds8_c2i.pt",
        config: None,
        family: "llamagen",
        tokens: "32x32 codes of 16,384 at 256²",
        licence: "MIT",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "janus-pro-1b",
        source: "hf:deepseek-community/Janus-Pro-1B",
        config: None,
        family: "janus",
        tokens: "24x24 codes of 16,384 at 384² (LlamaGen's VQ-16)",
        licence: "MIT (code), DeepSeek model licence (weights)",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "open-magvit2-256",
        source: "hf:TencentARC/Open-MAGVIT2/imagenet_256_L.ckpt",
        config: None,
        family: "open_magvit2",
        tokens: "16x16 lookup-free codes of 2^18 at 256²",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 1.17, PSNR 21.90 dB"),
        figures_from: Some("Open-MAGVIT2 paper (arXiv 2409.04410), Table 1"),
    },
    Entry {
        name: "ldm-celebahq-vq4",
        source: "hf:CompVis/ldm-celebahq-256/vqvae",
        config: None,
        family: "diffusers",
        tokens: "64x64 codes at 256² (f4)",
        licence: "Apache-2.0",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "emu3-vision-tokenizer",
        source: "hf:BAAI/Emu3-VisionTokenizer",
        config: None,
        family: "emu3",
        tokens: "64x64 codes of 32,768 at 512² (f8; an image as 4 repeated frames)",
        licence: "Apache-2.0",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "cosmos-di16x16",
        source: "hf:nvidia/Cosmos-Tokenizer-DI16x16",
        config: None,
        family: "cosmos",
        tokens: "16x16 FSQ codes of 64,000 at 256²",
        licence: "NVIDIA Open Model License",
        gated: false,
        published: Some("ImageNet val 256²: rFID 4.57, PSNR 19.93 dB, SSIM 0.49"),
        figures_from: Some("IBQ paper's comparison table (measured by IBQ's authors)"),
    },
    Entry {
        name: "cosmos-di8x8",
        source: "hf:nvidia/Cosmos-Tokenizer-DI8x8",
        config: None,
        family: "cosmos",
        tokens: "32x32 FSQ codes of 64,000 at 256²",
        licence: "NVIDIA Open Model License",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "var-vae",
        source: "hf:FoundationVision/var/vae_ch160v4096z32.pth",
        config: None,
        family: "var",
        tokens: "680 multi-scale codes of 4,096 at 256² (scales 1² … 16²)",
        licence: "MIT",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "titok-l32",
        source: "hf:yucornetto/tokenizer_titok_l32_imagenet",
        config: None,
        family: "titok",
        tokens: "1x32 codes of 4,096 at 256² (one row of 1-D tokens)",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 2.21"),
        figures_from: Some("1d-tokenizer README_TiTok.md (TiTok, arXiv 2406.07550)"),
    },
    Entry {
        name: "titok-b64",
        source: "hf:yucornetto/tokenizer_titok_b64_imagenet",
        config: None,
        family: "titok",
        tokens: "1x64 codes of 4,096 at 256² (one row of 1-D tokens)",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 1.70"),
        figures_from: Some("1d-tokenizer README_TiTok.md (TiTok, arXiv 2406.07550)"),
    },
    Entry {
        name: "titok-s128",
        source: "hf:yucornetto/tokenizer_titok_s128_imagenet",
        config: None,
        family: "titok",
        tokens: "1x128 codes of 4,096 at 256² (one row of 1-D tokens)",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 1.71"),
        figures_from: Some("1d-tokenizer README_TiTok.md (TiTok, arXiv 2406.07550)"),
    },
    Entry {
        name: "maskgit-vqgan-imagenet-f16-256",
        source: "hf:fun-research/TiTok/maskgit-vqgan-imagenet-f16-256.bin",
        config: None,
        family: "maskgit-vqgan",
        tokens: "16x16 codes of 1,024 at 256²",
        licence: "Apache-2.0",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "ibq-1024",
        source: "hf:TencentARC/IBQ-Tokenizer-1024/imagenet256_1024.ckpt",
        config: Some("ibq_1024"),
        family: "ibq",
        tokens: "16x16 codes of 1,024 at 256²",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 2.24, LPIPS 0.258, 99% of codes used"),
        figures_from: Some("SEED-Voken docs/IBQ.md (IBQ, arXiv 2412.02692)"),
    },
    Entry {
        name: "ibq-8192",
        source: "hf:TencentARC/IBQ-Tokenizer-8192/imagenet256_8192.ckpt",
        config: Some("ibq_8192"),
        family: "ibq",
        tokens: "16x16 codes of 8,192 at 256²",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 1.87, LPIPS 0.244, 98% of codes used"),
        figures_from: Some("SEED-Voken docs/IBQ.md (IBQ, arXiv 2412.02692)"),
    },
    Entry {
        name: "ibq-16384",
        source: "hf:TencentARC/IBQ-Tokenizer-16384/imagenet256_16384.ckpt",
        config: Some("ibq_16384"),
        family: "ibq",
        tokens: "16x16 codes of 16,384 at 256²",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 1.37, LPIPS 0.224, 96% of codes used"),
        figures_from: Some("SEED-Voken docs/IBQ.md (IBQ, arXiv 2412.02692)"),
    },
    Entry {
        name: "ibq-262144",
        source: "hf:TencentARC/IBQ-Tokenizer-262144/imagenet256_262144.ckpt",
        config: Some("ibq_262144"),
        family: "ibq",
        tokens: "16x16 codes of 262,144 at 256²",
        licence: "Apache-2.0",
        gated: false,
        published: Some("ImageNet val 256²: rFID 1.00, LPIPS 0.203, 84% of codes used"),
        figures_from: Some("SEED-Voken docs/IBQ.md (IBQ, arXiv 2412.02692)"),
    },
    Entry {
        name: "taming-f16-1024",
        source: "https://heibox.uni-heidelberg.de/d/8088892a516d4e3baf92/",
        config: Some("f16_1024"),
        family: "taming",
        tokens: "16x16 codes of 1,024 at 256² (24x24 at 384²)",
        licence: "MIT",
        gated: false,
        published: Some(
            "ImageNet val 256²: rFID 7.94; PSNR 23.30 dB, SSIM 0.521 (OptVQ's re-evaluation)",
        ),
        figures_from: Some("Taming Transformers (arXiv 2012.09841); OptVQ (arXiv 2412.15195)"),
    },
    Entry {
        name: "sd-vae-ft-mse",
        source: "hf:stabilityai/sd-vae-ft-mse",
        config: None,
        family: "autoencoder_kl",
        tokens: "4x32x32 latents at 256² (f8)",
        licence: "MIT",
        gated: false,
        published: Some("COCO 2017 val 256²: rFID 4.70, PSNR 24.5 dB, SSIM 0.71"),
        figures_from: Some("the model card (stabilityai/sd-vae-ft-mse)"),
    },
    Entry {
        name: "sdxl-vae",
        source: "hf:stabilityai/sdxl-vae",
        config: None,
        family: "autoencoder_kl",
        tokens: "4x32x32 latents at 256² (f8)",
        licence: "CreativeML Open RAIL++-M",
        gated: false,
        published: Some("ImageNet val 256²: rFID 0.72, PSNR 25.4 dB, SSIM 0.73"),
        figures_from: Some("the model card (stabilityai/sdxl-vae)"),
    },
    Entry {
        name: "sd3-vae",
        source: "hf:stabilityai/stable-diffusion-3-medium-diffusers/vae",
        config: None,
        family: "autoencoder_kl",
        tokens: "16x32x32 latents at 256² (f8)",
        licence: "Stability AI Community licence (non-commercial above a revenue threshold)",
        gated: true,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "flux-vae",
        source: "hf:black-forest-labs/FLUX.1-schnell/vae",
        config: None,
        family: "autoencoder_kl",
        tokens: "16x32x32 latents at 256² (f8), 2x2 patches: 256 tokens of 64",
        licence: "Apache-2.0",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "cosmos-ci16x16",
        source: "hf:nvidia/Cosmos-Tokenizer-CI16x16",
        config: None,
        family: "cosmos",
        tokens: "16x16x16 latents at 256²",
        licence: "NVIDIA Open Model License",
        gated: false,
        published: None,
        figures_from: None,
    },
    Entry {
        name: "cosmos-ci8x8",
        source: "hf:nvidia/Cosmos-Tokenizer-CI8x8",
        config: None,
        family: "cosmos",
        tokens: "16x32x32 latents at 256²",
        licence: "NVIDIA Open Model License",
        gated: false,
        published: None,
        figures_from: None,
    },
];

/// The entry a catalogue name names.
pub fn entry(name: &str) -> Option<&'static Entry> {
    CATALOGUE.iter().find(|e| e.name == name)
}

/// The Hub source of a catalogue name (`None` for names published outside the Hub).
pub fn resolve(name: &str) -> Option<&'static str> {
    entry(name)
        .map(|e| e.source)
        .filter(|s| s.starts_with("hf:"))
}

impl Entry {
    /// Whether its weights are on the Hub (else [`Entry::source`] is the page to get them from).
    pub fn on_hub(&self) -> bool {
        self.source.starts_with("hf:")
    }

    /// Why a name published outside the Hub is not opened: where its files are and what to
    /// pass once they are here.
    pub fn elsewhere(&self) -> String {
        let config = self
            .config
            .map_or(String::new(), |c| format!(" --config {c}"));
        format!(
            "{}: published outside the Hugging Face Hub; download its checkpoint from {} and \
             pass it: --model FILE{config}",
            self.name, self.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_a_valid_hub_source_of_a_registered_family() {
        let families: Vec<&str> = crate::FAMILIES.iter().map(|f| f.name()).collect();
        let mut names = std::collections::BTreeSet::new();
        for e in CATALOGUE {
            if e.on_hub() {
                imgseq_hub::HubSource::parse(e.source).unwrap();
            } else {
                assert!(e.source.starts_with("https://"), "{}", e.name);
                assert!(e.elsewhere().contains(e.source));
            }
            if let Some(c) = e.config {
                assert!(
                    imgseq_vqgan::presets::preset(c).is_some(),
                    "{}: {c}",
                    e.name
                );
            }
            assert!(names.insert(e.name), "{} twice", e.name);
            assert_eq!(
                e.published.is_some(),
                e.figures_from.is_some(),
                "{}",
                e.name
            );
            let family_ok = families.contains(&e.family)
                || (families.contains(&"vq")
                    && ["llamagen", "janus", "diffusers", "taming", "ibq"].contains(&e.family));
            assert!(family_ok, "{}: family {}", e.name, e.family);
        }
        assert_eq!(
            resolve("sd-vae-ft-mse"),
            Some("hf:stabilityai/sd-vae-ft-mse")
        );
        assert_eq!(resolve("nope"), None);
        assert_eq!(resolve("taming-f16-1024"), None);
        // Every family the loader reads has an entry.
        for family in [
            "llamagen",
            "janus",
            "diffusers",
            "taming",
            "ibq",
            "open_magvit2",
            "emu3",
            "cosmos",
            "titok",
            "maskgit-vqgan",
        ] {
            assert!(CATALOGUE.iter().any(|e| e.family == family), "{family}");
        }
    }
}
