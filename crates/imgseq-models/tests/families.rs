//! Every family fixture through the loader: opened by `imgseq_models::open` from its released
//! layout, described as its own family, and tokenized by the dataset job into both shard
//! formats with a manifest that names that family, crop rule and precision; a resumed job
//! with a setting that changes tokens is refused with the setting named.

use image::{Rgb, RgbImage};
use imgseq_core::input::Crop;
use imgseq_core::tokenizer::{OutputKind, Tokenizer};
use imgseq_models::{open, OpenOptions};
use imgseq_shards::job::{self, Options};
use imgseq_shards::manifest::{Manifest, TokenizerInfo};
use imgseq_shards::{ShardFormat, SourceOptions};
use std::path::{Path, PathBuf};

fn fx(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(p)
}

/// (source, config, family, crop) of every discrete family's fixture.
fn discrete() -> Vec<(PathBuf, Option<PathBuf>, &'static str, Crop)> {
    vec![
        (
            fx("vqgan/tiny.safetensors"),
            None,
            "taming",
            Crop::ShorterSide,
        ),
        (
            fx("vqgan/tiny.ckpt"),
            Some(fx("vqgan/tiny_model.yaml")),
            "taming",
            Crop::ShorterSide,
        ),
        (
            fx("llamagen/vq_tiny.pt"),
            None,
            "llamagen",
            Crop::AdmCenterCrop,
        ),
        (fx("diffusers/vq"), None, "diffusers", Crop::ShorterSide),
        (fx("janus"), None, "janus", Crop::PadToSquare),
        (
            fx("ibq/ibq_tiny.ckpt"),
            Some(fx("ibq/ibq_tiny_model.yaml")),
            "ibq",
            Crop::ShorterSide,
        ),
        (fx("lfq/tiny.ckpt"), None, "open_magvit2", Crop::ShorterSide),
        (fx("var/tiny.pth"), None, "var", Crop::ShorterSide),
        (
            fx("maskgit/maskgit-vqgan-imagenet-f16-256.bin"),
            None,
            "maskgit-vqgan",
            Crop::ShorterSide,
        ),
        (fx("titok/l"), None, "titok", Crop::ShorterSide),
        (
            fx("titok/vq8k/model.safetensors"),
            None,
            "titok",
            Crop::ShorterSide,
        ),
        (fx("chameleon/vq"), None, "chameleon", Crop::ShorterSide),
        (
            fx("chameleon/full/model.safetensors"),
            None,
            "chameleon",
            Crop::ShorterSide,
        ),
        (fx("emu3/vq"), None, "emu3", Crop::ShorterSide),
        (fx("cosmos/di"), None, "cosmos", Crop::ShorterSide),
        (fx("emu3/orig"), None, "emu3", Crop::ShorterSide),
        (
            fx("emu3/full/model.safetensors"),
            None,
            "emu3",
            Crop::ShorterSide,
        ),
    ]
}

/// Three small pictures in a folder.
fn pictures(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..3u32 {
        let img = RgbImage::from_fn(48, 40, |x, y| {
            Rgb([
                (x * 5 + i * 40) as u8,
                (y * 6) as u8,
                ((x + y) * 3 + i * 20) as u8,
            ])
        });
        img.save(src.join(format!("p{i}.png"))).unwrap();
    }
    src
}

fn options(format: ShardFormat) -> Options {
    Options {
        upscale: true,
        pad: false,
        batch: 2,
        shard_size: 2,
        num_jobs: 1,
        job_index: 0,
        progress: false,
        format,
        sources: SourceOptions::default(),
        dtype: Default::default(),
    }
}

fn opts(config: &Option<PathBuf>) -> OpenOptions {
    OpenOptions {
        config: config.clone(),
        size: Some(32),
        precision: imgseq_kernels::PrecisionRequest::F32,
        ..OpenOptions::default()
    }
}

#[test]
fn every_family_fixture_tokenizes_a_dataset_under_its_own_description() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    for (source, config, family, crop) in discrete() {
        let t =
            open(&source, &opts(&config)).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        let desc = t.describe_with_weights().unwrap();
        assert_eq!(desc.family, family, "{}", source.display());
        assert_eq!(desc.input.crop, crop, "{}", source.display());
        assert_eq!(desc.output.kind, OutputKind::Codes);
        assert_eq!(desc.output.codebook_size, t.codebook_size());
        assert_eq!(desc.weights.as_ref().unwrap().sha256.len(), 64);
        let info = TokenizerInfo::from_description(&desc, true, false).unwrap();
        for format in [ShardFormat::Wds, ShardFormat::Parquet] {
            let out = d.path().join(format!(
                "{family}-{}-{}",
                format.name(),
                source.display().to_string().len()
            ));
            let r = job::tokenize(
                &t,
                &info,
                std::slice::from_ref(&src),
                &out,
                &options(format),
            )
            .unwrap_or_else(|e| panic!("{} {}: {e}", source.display(), format.name()));
            assert_eq!((r.samples, r.errors), (3, 0));
            let m = Manifest::read(&out.join("manifest.json")).unwrap();
            assert_eq!(m.tokenizer.family, family);
            assert_eq!(m.tokenizer.precision, desc.precision);
            assert!(
                m.tokenizer.crop.contains(&crop.describe()),
                "{}",
                m.tokenizer.crop
            );
            assert_eq!(
                m.tokenizer.grid,
                [desc.output.shape[0], desc.output.shape[1]]
            );
        }
    }
}

#[test]
fn a_resumed_job_with_another_size_is_refused_naming_the_setting() {
    let d = tempfile::tempdir().unwrap();
    let src = pictures(d.path());
    let out = d.path().join("out");
    let source = fx("llamagen/vq_tiny.pt");
    let run = |size: u32| {
        let o = OpenOptions {
            size: Some(size),
            ..opts(&None)
        };
        let t = open(&source, &o).unwrap();
        let info =
            TokenizerInfo::from_description(&t.describe_with_weights().unwrap(), true, false)
                .unwrap();
        job::tokenize(
            &t,
            &info,
            std::slice::from_ref(&src),
            &out,
            &options(ShardFormat::Wds),
        )
    };
    run(32).unwrap();
    run(32).unwrap();
    let e = run(16).unwrap_err().to_string();
    assert!(
        e.contains("run.json") && e.contains("tokenizer.grid is [16,16] here, [8,8] now"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// A VAE describes its latents (scaling, shift, channels, grid), and a latent shard set's
/// manifest is made from that description as a token set's is; a description with neither a
/// codebook grid nor a latent block is refused by the shard writer.
#[test]
fn a_continuous_tokenizer_describes_its_latents_for_latent_shards() {
    let t = open(
        &fx("kl/sd"),
        &OpenOptions {
            size: Some(32),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let desc = t.describe_with_weights().unwrap();
    assert_eq!(desc.family, "autoencoder_kl");
    assert_eq!(desc.output.kind, OutputKind::Latents);
    assert_eq!(desc.draw.as_deref(), Some("mean"));
    let l = desc.latent.clone().expect("a VAE's latent block");
    assert_eq!((l.grid, l.patch), ([8, 8], None));
    assert_eq!(l.channels, desc.output.shape[0]);
    let info = TokenizerInfo::from_description(&desc, false, false).unwrap();
    let latent = info.latent.expect("latent settings");
    assert_eq!((info.n_codes, info.grid), (0, [8, 8]));
    assert_eq!(latent.shape, desc.output.shape);
    assert_eq!(latent.scaling_factor, l.scaling_factor);
    let mut no_latents = desc;
    no_latents.latent = None;
    let e = TokenizerInfo::from_description(&no_latents, false, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("grid of codebook tokens"), "{e}");
}

#[test]
fn a_missing_source_is_one_line_naming_it() {
    let e = open(
        Path::new("/nonexistent/model.safetensors"),
        &OpenOptions::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("/nonexistent/model.safetensors") && e.contains("No such file"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn the_opened_tokenizer_delegates_every_method_of_the_contract() {
    // The KL family overrides decode_encoded: the loader's wrapper must pass it through.
    let o = OpenOptions {
        size: Some(32),
        ..OpenOptions::default()
    };
    let t = open(&fx("kl/sd"), &o).unwrap();
    let img = image::RgbImage::from_pixel(32, 32, image::Rgb([90, 120, 200]));
    let e = t.encode_pictures(std::slice::from_ref(&img)).unwrap();
    let pics = t.decode_encoded(&e).unwrap();
    assert_eq!((pics.len(), pics[0].width()), (1, 32));
    let inner = t.tokenizer().decode_encoded(&e).unwrap();
    assert_eq!(pics, inner);
}

#[test]
fn raw_means_one_thing_for_every_lightning_family() {
    // IBQ and Open-MAGVIT2 both keep LitEma copies: `raw` runs the training weights of
    // either, and the description says which set made the tokens (a resume with the other
    // is refused by run.json).
    for (source, config) in [
        (fx("ibq/ibq_tiny.ckpt"), Some(fx("ibq/ibq_tiny_model.yaml"))),
        (fx("lfq/tiny.ckpt"), None),
    ] {
        let ema = open(&source, &opts(&config)).unwrap();
        let raw = open(
            &source,
            &OpenOptions {
                raw: true,
                ..opts(&config)
            },
        )
        .unwrap();
        assert_eq!(
            ema.describe().precision,
            "f32, EMA weights",
            "{}",
            source.display()
        );
        assert_eq!(
            raw.describe().precision,
            "f32, raw weights",
            "{}",
            source.display()
        );
        let img = image::RgbImage::from_fn(32, 32, |x, y| {
            image::Rgb([(x * 8) as u8, (y * 8) as u8, 70])
        });
        let a = ema
            .encode_pictures(std::slice::from_ref(&img))
            .unwrap()
            .into_tokens()
            .unwrap();
        let b = raw
            .encode_pictures(std::slice::from_ref(&img))
            .unwrap()
            .into_tokens()
            .unwrap();
        assert_ne!(
            a.data,
            b.data,
            "{}: raw and EMA weights gave the same tokens",
            source.display()
        );
    }
    // A family without EMA copies refuses it with one line.
    let e = open(
        &fx("vqgan/tiny.safetensors"),
        &OpenOptions {
            raw: true,
            ..opts(&None)
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("--raw applies to Lightning checkpoints with EMA copies"),
        "{e}"
    );
}

/// Tokens do not depend on the batch or the threads, for every family (f32): eight different
/// pictures give the same tokens (a VAE the same latents, bit for bit) in one batch of 8, one
/// by one, and one by one on a single thread.
#[test]
fn tokens_do_not_depend_on_the_batch_or_the_threads() {
    let mut cases: Vec<(PathBuf, Option<PathBuf>, &str)> = discrete()
        .into_iter()
        .map(|(w, c, f, _)| (w, c, f))
        .collect();
    cases.push((fx("kl/sd"), None, "autoencoder_kl"));
    cases.push((fx("kl/flux2"), None, "autoencoder_kl"));
    cases.push((fx("dcae/dc"), None, "autoencoder_dc"));
    cases.push((fx("cosmos/ci"), None, "cosmos"));
    cases.push((fx("clip/vision"), None, "clip"));
    cases.push((fx("siglip/vision"), None, "siglip"));
    cases.push((fx("dinov2/plain"), None, "dinov2"));
    cases.push((fx("dinov2/registers"), None, "dinov2"));
    let pics: Vec<RgbImage> = (0..8u32)
        .map(|i| {
            RgbImage::from_fn(40, 36, |x, y| {
                Rgb([
                    ((x * (7 + i) + y * 3) % 256) as u8,
                    ((y * (5 + 2 * i) + x) % 256) as u8,
                    ((x * y + 40 * i) % 256) as u8,
                ])
            })
        })
        .collect();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for (w, config, family) in cases {
        let o = OpenOptions {
            config,
            // The SigLIP fixture reads its own 36² only.
            size: Some(if family == "siglip" { 36 } else { 32 }),
            precision: imgseq_kernels::PrecisionRequest::F32,
            ..OpenOptions::default()
        };
        let t = open(&w, &o).unwrap_or_else(|e| panic!("{family}: {e}"));
        let x: Vec<RgbImage> = pics.iter().map(|p| t.input().square(p).unwrap()).collect();
        let batch = bits(&t.encode_pictures(&x).unwrap());
        let alone: Vec<u32> = x
            .iter()
            .flat_map(|p| bits(&t.encode_pictures(std::slice::from_ref(p)).unwrap()))
            .collect();
        let single: Vec<u32> = one_thread.install(|| {
            x.iter()
                .flat_map(|p| bits(&t.encode_pictures(std::slice::from_ref(p)).unwrap()))
                .collect()
        });
        assert_eq!(alone, single, "{family}: 1 thread against all");
        assert_eq!(batch, alone, "{family}: a batch of 8 against one by one");
    }
}

/// Every value of an output, exactly (tokens as they are, floats by their bits).
fn bits(e: &imgseq_core::tokenizer::Encoded) -> Vec<u32> {
    use imgseq_core::tokenizer::Encoded;
    match e {
        Encoded::Tokens(t) => t.data.iter().map(|&v| v as u32).collect(),
        Encoded::Latents(l) => l.data.iter().map(|v| v.to_bits()).collect(),
        Encoded::Embeddings(m) => m.data.iter().map(|v| v.to_bits()).collect(),
    }
}

/// A CLIP vision tower through the loader: its family, and the library's last hidden state
/// of the processor's input (CLIP's mean and std).
#[test]
fn a_clip_tower_opens_through_the_loader_as_its_last_hidden_state() {
    let t = open(&fx("clip/vision"), &OpenOptions::default()).unwrap();
    let d = t.describe();
    assert_eq!(
        (d.family.as_str(), d.output.kind),
        ("clip", OutputKind::Embeddings)
    );
    assert_eq!(d.output.shape, vec![17, 32]);
    // Its processor's rule, read from its preprocessor_config.json, named in the description.
    let input = serde_json::to_value(&d.input).unwrap();
    assert_eq!(
        (&input["crop"], &input["resize"], &input["resample"]),
        (
            &serde_json::json!("shortest_edge_crop"),
            &serde_json::json!(32),
            &serde_json::json!("bicubic")
        )
    );
    assert!(t
        .files
        .iter()
        .any(|f| f.ends_with("preprocessor_config.json")));
    let pic = RgbImage::from_fn(40, 36, |x, y| Rgb([(x * 5) as u8, (y * 7) as u8, 90]));
    let x = t.input().square(&pic).unwrap();
    let got = t.encode_pictures(std::slice::from_ref(&x)).unwrap();
    let m = imgseq_vit::clip::load(&fx("clip/vision"), &candle_core::Device::Cpu).unwrap();
    let input = t.input_tensor(std::slice::from_ref(&x)).unwrap();
    let want = m.forward_all(&input).unwrap();
    let want = want.hidden_states.last().unwrap().flatten_all().unwrap();
    assert_eq!(
        bits(&got),
        want.to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    );
    // The processor's normalisation: a mid-gray pixel is (0.5 − mean) / std.
    let gray = RgbImage::from_pixel(32, 32, Rgb([128, 128, 128]));
    let v = t
        .input_tensor(&[gray])
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let want0 = (128.0 / 255.0 - imgseq_vit::clip::CLIP_MEAN[0]) / imgseq_vit::clip::CLIP_STD[0];
    assert!((v[0] - want0).abs() < 1e-6, "{} vs {want0}", v[0]);
}

/// LLaVA's features: `--layer -2 --patches-only` give hidden state −2 without its class token;
/// a tokenizer that is no tower refuses the options in one line; a layer past the tower's is
/// refused when the model opens.
#[test]
fn a_clip_tower_gives_the_layer_asked_and_other_families_refuse_it() {
    let o = OpenOptions {
        layer: Some(-2),
        patches_only: true,
        ..OpenOptions::default()
    };
    let t = open(&fx("clip/vision"), &o).unwrap();
    assert_eq!(t.describe().output.shape, vec![16, 32]);
    let pic = RgbImage::from_fn(32, 32, |x, y| Rgb([(x * 5) as u8, (y * 7) as u8, 90]));
    let got = t.encode_pictures(std::slice::from_ref(&pic)).unwrap();
    let m = imgseq_vit::clip::load(&fx("clip/vision"), &candle_core::Device::Cpu).unwrap();
    let input = t.input_tensor(std::slice::from_ref(&pic)).unwrap();
    let out = m.forward_all(&input).unwrap();
    let want = out.hidden_states[1]
        .narrow(1, 1, 16)
        .unwrap()
        .flatten_all()
        .unwrap();
    let want: Vec<u32> = want
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(bits(&got), want);
    let e = open(&fx("llamagen/vq_tiny.pt"), &o)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("vision towers") && e.lines().count() == 1, "{e}");
    let far = OpenOptions {
        layer: Some(7),
        ..OpenOptions::default()
    };
    let e = open(&fx("clip/vision"), &far).err().unwrap().to_string();
    assert!(e.contains("layer 7") && e.contains("0 to 2"), "{e}");
}

/// The last hidden state the library gives for the tower's own input of `pic`.
fn library_state(t: &imgseq_models::Opened, pic: &RgbImage, out: &str) -> Vec<u32> {
    use imgseq_vit::tower::VisionModel;
    let input = t.input_tensor(std::slice::from_ref(pic)).unwrap();
    let src = t.source.clone();
    let o = match t.describe().family.as_str() {
        "siglip" => imgseq_vit::siglip::load(&src, &candle_core::Device::Cpu)
            .unwrap()
            .forward_tower(&input),
        _ => imgseq_vit::dinov2::load(&src, &candle_core::Device::Cpu)
            .unwrap()
            .forward_tower(&input),
    }
    .unwrap();
    let h = match out {
        "last" => o.last_hidden_state,
        _ => o.hidden_states[o.hidden_states.len() - 2].clone(),
    };
    let h = if out == "-2 patches" {
        let n = h.dim(1).unwrap();
        h.narrow(1, 3, n - 3).unwrap()
    } else {
        h
    };
    h.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// SigLIP and DINOv2 through the loader: their families, token counts (SigLIP: patches only;
/// DINOv2 at 224² unless --size says: the class token, the registers, the patches), the
/// library's last hidden state (or layer −2 without the tokens in front) of the processor's
/// input, and their processors' normalisation.
#[test]
fn siglip_and_dinov2_open_through_the_loader_as_their_last_hidden_state() {
    let pic = RgbImage::from_fn(50, 44, |x, y| Rgb([(x * 5) as u8, (y * 7) as u8, 90]));
    let cases = [
        ("siglip/vision", None, false, "siglip", vec![16, 32]),
        ("dinov2/plain", None, false, "dinov2", vec![1 + 5 * 5, 32]),
        (
            "dinov2/plain",
            Some(224),
            false,
            "dinov2",
            vec![1 + 28 * 28, 32],
        ),
        ("dinov2/plain", Some(48), false, "dinov2", vec![1 + 36, 32]),
        ("dinov2/registers", Some(48), true, "dinov2", vec![36, 32]),
    ];
    for (src, size, llava, family, shape) in cases {
        let o = OpenOptions {
            size,
            layer: llava.then_some(-2),
            patches_only: llava,
            ..OpenOptions::default()
        };
        let t = open(&fx(src), &o).unwrap_or_else(|e| panic!("{src}: {e}"));
        let d = t.describe();
        assert_eq!(
            (d.family.as_str(), d.output.kind, &d.output.shape),
            (family, OutputKind::Embeddings, &shape),
            "{src}"
        );
        let x = t.input().square(&pic).unwrap();
        let got = t.encode_pictures(std::slice::from_ref(&x)).unwrap();
        let want = library_state(&t, &x, if llava { "-2 patches" } else { "last" });
        assert_eq!(bits(&got), want, "{src}");
    }
    // The processors' normalisation: a mid-gray pixel is (0.5 − mean) / std.
    let gray = RgbImage::from_pixel(36, 36, Rgb([128, 128, 128]));
    for (src, mean, std) in [("siglip/vision", 0.5, 0.5), ("dinov2/plain", 0.485, 0.229)] {
        let t = open(&fx(src), &OpenOptions::default()).unwrap();
        let v = t.input_tensor(std::slice::from_ref(&gray)).unwrap();
        let v0 = v.flatten_all().unwrap().to_vec1::<f32>().unwrap()[0];
        let want = (128.0 / 255.0 - mean) / std;
        assert!((v0 - want).abs() < 1e-6, "{src}: {v0} vs {want}");
    }
    // SigLIP reads its own image_size only; DINOv2 refuses a side under its patch.
    let e = open(
        &fx("siglip/vision"),
        &OpenOptions {
            size: Some(64),
            ..OpenOptions::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("36×36") && e.lines().count() == 1, "{e}");
    let e = open(
        &fx("dinov2/plain"),
        &OpenOptions {
            size: Some(4),
            ..OpenOptions::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("--size 4"), "{e}");
}

/// `pooled`: every tower's pooler_output as one token (CLIP: its normed class token, SigLIP:
/// the attention-pooling head, DINOv2: the class token of the last state), the library's bit
/// for bit; with a layer it is refused in one line.
#[test]
fn a_tower_gives_its_pooled_output_as_one_token() {
    use imgseq_vit::tower::VisionModel;
    let pic = RgbImage::from_fn(40, 40, |x, y| Rgb([(x * 5) as u8, (y * 7) as u8, 90]));
    let o = OpenOptions {
        pooled: true,
        ..OpenOptions::default()
    };
    for src in ["clip/vision", "siglip/vision", "dinov2/plain"] {
        let t = open(&fx(src), &o).unwrap_or_else(|e| panic!("{src}: {e}"));
        assert_eq!(t.describe().output.shape, vec![1, 32], "{src}");
        let x = t.input().square(&pic).unwrap();
        let got = t.encode_pictures(std::slice::from_ref(&x)).unwrap();
        let input = t.input_tensor(std::slice::from_ref(&x)).unwrap();
        let dev = candle_core::Device::Cpu;
        let out = match src {
            "clip/vision" => imgseq_vit::clip::load(&fx(src), &dev)
                .unwrap()
                .forward_tower(&input),
            "siglip/vision" => imgseq_vit::siglip::load(&fx(src), &dev)
                .unwrap()
                .forward_tower(&input),
            _ => imgseq_vit::dinov2::load(&fx(src), &dev)
                .unwrap()
                .forward_tower(&input),
        }
        .unwrap();
        let want: Vec<u32> = out
            .pooled
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(bits(&got), want, "{src}");
    }
    let e = open(
        &fx("siglip/vision"),
        &OpenOptions {
            pooled: true,
            layer: Some(-2),
            ..OpenOptions::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("pooled") && e.lines().count() == 1, "{e}");
}

/// `--precision` for the towers: bf16 when asked (the description and the loader's choice say
/// it; the state within the bar of f32's, not f32's bits), f32 as asked, and `auto` f32 on
/// every CPU (a tower's features never depend on the machine), to the bit.
#[test]
fn a_tower_runs_in_the_precision_asked_and_auto_keeps_f32() {
    use imgseq_kernels::{Precision, PrecisionRequest};
    use imgseq_vit::tower::{StateAgreement, MIN_BF16_COSINE};
    let pic = RgbImage::from_fn(40, 40, |x, y| Rgb([(x * 5) as u8, (y * 7) as u8, 90]));
    for src in ["clip/vision", "siglip/vision", "dinov2/plain"] {
        let at = |precision| {
            let o = OpenOptions {
                precision,
                ..OpenOptions::default()
            };
            open(&fx(src), &o).unwrap_or_else(|e| panic!("{src}: {e}"))
        };
        let (t32, t16, auto) = (
            at(PrecisionRequest::F32),
            at(PrecisionRequest::Bf16),
            at(PrecisionRequest::Auto),
        );
        let chosen = |t: &imgseq_models::Opened| t.precision.as_ref().map(|c| c.precision);
        assert_eq!(t32.describe().precision, "f32", "{src}");
        assert_eq!(t16.describe().precision, "bf16", "{src}");
        assert_eq!(chosen(&t16), Some(Precision::Bf16), "{src}");
        let x = t32.input().square(&pic).unwrap();
        let state = |t: &imgseq_models::Opened| {
            let imgseq_core::tokenizer::Encoded::Embeddings(e) =
                t.encode_pictures(std::slice::from_ref(&x)).unwrap()
            else {
                panic!("{src}: embeddings expected")
            };
            candle_core::Tensor::from_vec(e.data, (e.n, e.tokens, e.dim), &candle_core::Device::Cpu)
                .unwrap()
        };
        let (s32, s16, sauto) = (state(&t32), state(&t16), state(&auto));
        let a = StateAgreement::of(&s16, &s32).unwrap();
        assert!(a.min_cosine >= MIN_BF16_COSINE, "{src}: {a}");
        let bits = |t: &candle_core::Tensor| {
            t.flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_ne!(bits(&s16), bits(&s32), "{src}: bf16 gave f32's bits");
        let c = auto.precision.clone().unwrap();
        assert_eq!(c.precision, Precision::F32, "{src}: {c}");
        assert_eq!(auto.describe().precision, "f32", "{src}");
        assert_eq!(bits(&sauto), bits(&s32), "{src}: auto ({c})");
    }
}

/// A line of `/proc/self/status` in MiB (`VmHWM`: the peak resident set; `VmRSS`: now).
fn status_mib(key: &str) -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The vision towers' speed rows: `scripts/bench_towers.py --out DIR` saves CLIP ViT-L/14-336
/// and SigLIP so400m-384 with random weights and transformers' f32 outputs, times
/// transformers, then runs this once per row (`IMGSEQ_TOWER_BENCH=DIR`,
/// `IMGSEQ_TOWER_ONLY=clip`, `IMGSEQ_TOWER_BATCHES=16`, `IMGSEQ_TOWER_PRECISION=f32|bf16`,
/// `IMGSEQ_TOWER_REPS=2`, `IMGSEQ_TOWER_WARMUP=1`): imgseq's forward through the loader on the
/// same pixel values, best of the repetitions after the untimed ones, its agreement with transformers' f32 last hidden state
/// (each token's cosine, the largest difference relative to the largest value) and this
/// process's peak resident set (`VmHWM`), printed as a `ROW {json}` line the script reads.
#[test]
#[ignore]
fn released_tower_speed() {
    use imgseq_kernels::PrecisionRequest;
    use imgseq_vit::tower::{StateAgreement, MIN_BF16_COSINE};
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let dir = PathBuf::from(var("IMGSEQ_TOWER_BENCH"));
    let batches: Vec<usize> = var("IMGSEQ_TOWER_BATCHES")
        .split(',')
        .map(|b| b.parse().unwrap())
        .collect();
    let precision: PrecisionRequest = std::env::var("IMGSEQ_TOWER_PRECISION")
        .unwrap_or_else(|_| "f32".into())
        .parse()
        .unwrap();
    let reps: usize = std::env::var("IMGSEQ_TOWER_REPS")
        .map_or(2, |r| r.parse().unwrap())
        .max(1);
    let warmup: usize = std::env::var("IMGSEQ_TOWER_WARMUP").map_or(1, |r| r.parse().unwrap());
    for name in var("IMGSEQ_TOWER_ONLY").split(',') {
        let o = OpenOptions {
            precision,
            ..OpenOptions::default()
        };
        let start = std::time::Instant::now();
        let t = open(&dir.join(name), &o).unwrap();
        let load_s = start.elapsed().as_secs_f64();
        let loaded_mib = status_mib("VmRSS:").unwrap_or(f64::NAN);
        let chosen = t
            .precision
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        eprintln!("imgseq {name}: precision {chosen}; loaded in {load_s:.1} s, {loaded_mib:.0} MiB resident");
        for &b in &batches {
            let io = candle_core::safetensors::load(
                dir.join(format!("{name}-b{b}.safetensors")),
                &candle_core::Device::Cpu,
            )
            .unwrap();
            let run = || {
                let start = std::time::Instant::now();
                let e = t.encode(&io["pixel_values"]).unwrap();
                (start.elapsed().as_secs_f64(), e)
            };
            for _ in 0..warmup {
                run();
            }
            let (mut secs, mut e) = run();
            for _ in 1..reps {
                let (s, again) = run();
                (secs, e) = (secs.min(s), again);
            }
            let imgseq_core::tokenizer::Encoded::Embeddings(e) = e else {
                panic!("{name}: embeddings expected")
            };
            let got = candle_core::Tensor::from_vec(
                e.data,
                (e.n, e.tokens, e.dim),
                &candle_core::Device::Cpu,
            )
            .unwrap();
            let a = StateAgreement::of(&got, &io["last_hidden_state"]).unwrap();
            let peak = status_mib("VmHWM:").unwrap_or(f64::NAN);
            let p = t.describe().precision;
            eprintln!(
                "imgseq {name} {p} batch {b}: {secs:.2} s ({:.3} s/image); last hidden state \
                 against transformers' f32: {a}; peak RSS {peak:.0} MiB",
                secs / b as f64
            );
            println!(
                "ROW {}",
                serde_json::json!({"tower": name, "precision": p, "batch": b, "secs": secs,
                    "load_secs": load_s, "loaded_mib": loaded_mib, "peak_mib": peak,
                    "min_cosine": a.min_cosine, "max_rel": a.max_rel})
            );
            if p == "f32" {
                assert!(a.max_rel < 1e-3, "{name}: {a}");
            } else {
                assert!(a.min_cosine >= MIN_BF16_COSINE, "{name}: {a}");
            }
        }
    }
}
