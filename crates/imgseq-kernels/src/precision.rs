//! Which arithmetic inference runs in, and how `--precision f32|bf16|auto` becomes one.
//!
//! [`Precision::Bf16`] rounds the weights (once, at load) and the inputs (on each call) of a
//! model's bf16 conv and linear layers to bfloat16 and sums the products in f32
//! ([`crate::cpu::bf16`]): the ViT's patch projection and linear layers, the VQGAN's decoding
//! convs. Norms, softmax, attention products and the codebook search stay f32.

use crate::check_cache::{CheckCache, Remembered};
use crate::cpu::bf16::Kernel;
use std::fmt;
use std::str::FromStr;

/// The arithmetic of the conv and linear layers at inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 everywhere (training, and the reference for bf16).
    #[default]
    F32,
    /// bf16 weights and activations, f32 accumulation (inference only: no backward).
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What was asked for: a precision, or `auto` — bf16 where the CPU runs AVX512-BF16 faster
/// than f32 ([`bf16_support`]) and the loaded model passes its agreement check against f32,
/// else f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrecisionRequest {
    F32,
    Bf16,
    #[default]
    Auto,
}

impl FromStr for PrecisionRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "auto" => Ok(Self::Auto),
            _ => Err(format!("unknown precision `{s}` (f32, bf16 or auto)")),
        }
    }
}

impl fmt::Display for PrecisionRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Auto => "auto",
        })
    }
}

/// The outcome of a model's check that its bf16 path agrees with its f32 path.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub passed: bool,
    /// What was compared and how well it agreed, e.g. "64/64 tokens equal".
    pub summary: String,
}

/// The precision that runs and why (for the CLI to say).
#[derive(Debug, Clone, PartialEq)]
pub struct PrecisionChoice {
    pub precision: Precision,
    /// Whether bf16 runs on `vdpbf16ps` (false: the portable emulation, or f32).
    pub native: bool,
    pub reason: String,
}

impl fmt::Display for PrecisionChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.precision, self.reason)
    }
}

/// Whether this CPU runs bf16 natively (AVX512-BF16 `vdpbf16ps`).
pub fn bf16_native() -> bool {
    Kernel::native_available()
}

/// What bf16 is worth on a CPU: absent, present but slower than f32, or faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Support {
    /// No AVX512-BF16: bf16 is the portable emulation (several times slower than f32).
    Absent,
    /// `vdpbf16ps` exists but does fewer multiply-adds per cycle than the f32 FMA.
    SlowerThanF32,
    /// `vdpbf16ps` does more multiply-adds per cycle than the f32 FMA.
    FasterThanF32,
}

/// This CPU's [`Bf16Support`], from its instructions and vendor — known per CPU kind, never
/// timed (one machine always makes the same choice).
///
/// Measured (2 threads, `examples/bf16_bench.rs` per layer, `examples/dot_rate.rs` per
/// instruction): on AMD Zen 4 our bf16 convs and linears ran 1.4–4.2× the f32 ones; on Intel
/// Xeon (Sapphire Rapids, 2026-12-02) `vdpbf16ps` issues at a quarter of the FMA rate — half
/// f32's multiply-adds per cycle — and every bf16 layer ran 0.36–1.0× the f32 one. Intel's
/// fast bf16 unit is AMX, which only the bf16 *convs* use ([`bf16_conv_support`]); for linear
/// layers Intel counts as slower, AMD as faster.
pub fn bf16_support() -> Bf16Support {
    if !bf16_native() {
        Bf16Support::Absent
    } else if cpu_vendor() == "AuthenticAMD" {
        Bf16Support::FasterThanF32
    } else {
        Bf16Support::SlowerThanF32
    }
}

/// [`bf16_support`] for a model whose bf16 layers are convs (the VQGAN): faster than f32 also
/// where AMX tiles run them ([`Kernel::amx_available`]: ~30× the f32 FMA's multiply-adds per
/// cycle on a Sapphire Rapids core; the f16-1024 decode 3.3–3.6× faster than in f32 there,
/// `examples/bf16_bench.rs`).
pub fn bf16_conv_support() -> Bf16Support {
    if Kernel::amx_available() {
        Bf16Support::FasterThanF32
    } else {
        bf16_support()
    }
}

/// The CPUID vendor string ("AuthenticAMD", "GenuineIntel", …; "" off x86-64).
pub use crate::cpu::features::vendor as cpu_vendor;

impl PrecisionRequest {
    /// Resolves the request on this CPU: `f32` and `bf16` as asked (bf16 without AVX512-BF16
    /// is the slow emulation); `auto` bf16 when the CPU runs `vdpbf16ps` faster than f32
    /// ([`bf16_support`]) and the model's agreement `check` passes, else f32.
    ///
    /// The choice depends on the CPU's kind and the model only — never on a timing — so every
    /// run on one machine decodes the same tokens to the same pixels. (A speed probe of a conv
    /// decided it before: on one AMD EPYC it measured bf16 at 1.1× to 4.7× the f32 conv from
    /// run to run, flipping the choice.) On a CPU where bf16 is faster per layer, f32 can still
    /// win a whole model (our f32 Winograd F(4,3) against bf16 convs): `--precision f32` is
    /// the user's override (`examples/bf16_bench.rs` measures each layer).
    pub fn resolve<E>(
        self,
        check: impl FnOnce() -> Result<Agreement, E>,
    ) -> Result<PrecisionChoice, E> {
        self.resolve_with(bf16_support(), check)
    }

    /// [`Self::resolve`] for a model whose bf16 layers are convs ([`bf16_conv_support`]:
    /// AMX counts as faster).
    pub fn resolve_convs<E>(
        self,
        check: impl FnOnce() -> Result<Agreement, E>,
    ) -> Result<PrecisionChoice, E> {
        self.resolve_with(bf16_conv_support(), check)
    }

    /// [`Self::resolve`] for a CPU with the given [`Bf16Support`].
    pub fn resolve_with<E>(
        self,
        support: Bf16Support,
        check: impl FnOnce() -> Result<Agreement, E>,
    ) -> Result<PrecisionChoice, E> {
        let native = support != Bf16Support::Absent;
        let choice = |precision, native, reason: String| PrecisionChoice {
            precision,
            native,
            reason,
        };
        Ok(match self {
            Self::F32 => choice(Precision::F32, false, "requested".into()),
            Self::Bf16 if native => {
                choice(Precision::Bf16, true, format!("requested; {}", unit_name()))
            }
            Self::Bf16 => choice(
                Precision::Bf16,
                false,
                "requested; this CPU has no AVX512-BF16, so the portable emulation runs \
                 (slow)"
                    .into(),
            ),
            Self::Auto if !native => choice(
                Precision::F32,
                false,
                "auto: this CPU has no AVX512-BF16".into(),
            ),
            Self::Auto if support == Bf16Support::SlowerThanF32 => choice(
                Precision::F32,
                false,
                "auto: this CPU's vdpbf16ps does fewer multiply-adds per cycle than its f32 \
                 FMA (Intel; AMX tiles run only bf16 convs), so f32 is faster"
                    .into(),
            ),
            Self::Auto => {
                let a = check()?;
                if a.passed {
                    choice(
                        Precision::Bf16,
                        true,
                        format!(
                            "auto: {}, agreement check passed: {}",
                            unit_name(),
                            a.summary
                        ),
                    )
                } else {
                    choice(
                        Precision::F32,
                        false,
                        format!("auto: the bf16 agreement check failed: {}", a.summary),
                    )
                }
            }
        })
    }
}

/// A model whose conv or linear layers can run in bf16: the one precision walk the models
/// share. A model says how to read and set its precision and how to run its agreement check;
/// keeping the precision across the check and resolving `--precision` are done here.
pub trait Bf16Model {
    type Error;

    /// The precision the model's bf16-capable layers run in.
    fn precision(&self) -> Precision;

    /// Sets every bf16-capable layer to `precision` (bf16: weights packed once).
    fn set_precision(&mut self, precision: Precision) -> Result<(), Self::Error>;

    /// Runs the model in f32 and in bf16 and compares the two, leaving it in bf16.
    fn agreement_ending_in_bf16(&mut self) -> Result<Agreement, Self::Error>;

    /// What bf16 is worth for this model on this CPU: [`bf16_support`] (linear layers), or
    /// [`bf16_conv_support`] for a model of convs.
    fn bf16_support(&self) -> Bf16Support {
        bf16_support()
    }

    /// [`Self::agreement_ending_in_bf16`], the model keeping its precision.
    fn bf16_agreement(&mut self) -> Result<Agreement, Self::Error> {
        let prev = self.precision();
        let a = self.agreement_ending_in_bf16();
        self.set_precision(prev)?;
        a
    }

    /// Resolves `--precision` for this model on this CPU and sets it: `f32` and `bf16` as
    /// asked; `auto` as [`PrecisionRequest::resolve_with`] decides, with the model's agreement
    /// check (which leaves the model in bf16, so a passing `auto` does not pack the weights
    /// twice). Says which precision runs and why.
    fn choose_precision(
        &mut self,
        request: PrecisionRequest,
    ) -> Result<PrecisionChoice, Self::Error> {
        self.choose_precision_remembered(request, None)
    }

    /// [`Self::choose_precision`] with `auto`'s agreement check looked up in `cache` under
    /// `key` ([`crate::check_cache::check_key`]) before it runs, and remembered there after
    /// (a cache that cannot be written only means the next run checks again).
    fn choose_precision_remembered(
        &mut self,
        request: PrecisionRequest,
        cache: Option<(&CheckCache, &str)>,
    ) -> Result<PrecisionChoice, Self::Error> {
        let support = self.bf16_support();
        let mut ran = None;
        // The cache is read only where the check would run (`auto` on a CPU where bf16 pays).
        let choice = request.resolve_with(support, || match cache.and_then(|(c, k)| c.get(k)) {
            Some(a) => Ok(Agreement {
                passed: a.passed,
                summary: format!("{} (checked on an earlier run)", a.summary),
            }),
            None => {
                self.set_precision(Precision::F32)?;
                let a = self.agreement_ending_in_bf16()?;
                ran = Some(a.clone());
                Ok(a)
            }
        })?;
        if let (Some(a), Some((c, k))) = (ran, cache) {
            let _ = c.put(
                k,
                &Remembered {
                    passed: a.passed,
                    summary: a.summary,
                },
            );
        }
        self.set_precision(choice.precision)?;
        Ok(choice)
    }
}

/// What runs bf16 here, for the CLI's line.
fn unit_name() -> &'static str {
    if Kernel::amx_available() {
        "AMX tiles for the convs, AVX512-BF16 vdpbf16ps for the rest"
    } else {
        "AVX512-BF16 vdpbf16ps"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_resolve() {
        for s in ["f32", "bf16", "auto"] {
            assert_eq!(s.parse::<PrecisionRequest>().unwrap().to_string(), s);
        }
        assert!("fp16".parse::<PrecisionRequest>().is_err());
        let never = || -> Result<Agreement, ()> { panic!("no check expected") };
        let ag = |passed| {
            move || {
                Ok::<_, ()>(Agreement {
                    passed,
                    summary: "3/64 differ".into(),
                })
            }
        };
        use Bf16Support::*;
        for support in [Absent, SlowerThanF32, FasterThanF32] {
            let c = PrecisionRequest::F32.resolve_with(support, never).unwrap();
            assert_eq!((c.precision, c.native), (Precision::F32, false));
            let c = PrecisionRequest::Bf16.resolve_with(support, never).unwrap();
            assert_eq!(
                (c.precision, c.native),
                (Precision::Bf16, support != Absent)
            );
        }
        let c = PrecisionRequest::Auto.resolve_with(Absent, never).unwrap();
        assert!(c.precision == Precision::F32 && c.reason.contains("no AVX512-BF16"));
        let c = PrecisionRequest::Auto
            .resolve_with(SlowerThanF32, never)
            .unwrap();
        assert!(c.precision == Precision::F32 && c.reason.contains("so f32 is faster"));
        let c = PrecisionRequest::Auto
            .resolve_with(FasterThanF32, ag(false))
            .unwrap();
        assert_eq!(c.precision, Precision::F32);
        assert!(
            c.reason.contains("check failed: 3/64 differ"),
            "{}",
            c.reason
        );
        let c = PrecisionRequest::Auto
            .resolve_with(FasterThanF32, ag(true))
            .unwrap();
        assert_eq!((c.precision, c.native), (Precision::Bf16, true));
        assert!(
            c.reason.contains("check passed: 3/64 differ"),
            "{}",
            c.reason
        );
    }

    /// A model that logs every precision it is set to.
    struct Log {
        now: Precision,
        sets: Vec<Precision>,
        passes: bool,
    }

    impl Bf16Model for Log {
        type Error = ();
        fn precision(&self) -> Precision {
            self.now
        }
        fn set_precision(&mut self, p: Precision) -> Result<(), ()> {
            self.now = p;
            self.sets.push(p);
            Ok(())
        }
        fn agreement_ending_in_bf16(&mut self) -> Result<Agreement, ()> {
            self.set_precision(Precision::F32)?;
            self.set_precision(Precision::Bf16)?;
            Ok(Agreement {
                passed: self.passes,
                summary: "check".into(),
            })
        }
        fn bf16_support(&self) -> Bf16Support {
            Bf16Support::FasterThanF32
        }
    }

    #[test]
    fn the_precision_walk_keeps_the_precision_and_packs_once() {
        use Precision::{Bf16, F32};
        let log = |passes| Log {
            now: F32,
            sets: vec![],
            passes,
        };
        // The check leaves bf16; bf16_agreement goes back to what was set.
        let mut m = log(true);
        assert!(m.bf16_agreement().unwrap().passed);
        assert_eq!((m.now, m.sets.as_slice()), (F32, &[F32, Bf16, F32][..]));
        // auto passing: f32, the check (f32, bf16), then bf16 again (a no-op for a model that
        // skips an unchanged precision).
        let mut m = log(true);
        let c = m.choose_precision(PrecisionRequest::Auto).unwrap();
        assert_eq!(c.precision, Bf16);
        assert_eq!(m.sets, [F32, F32, Bf16, Bf16]);
        let mut m = log(false);
        let c = m.choose_precision(PrecisionRequest::Auto).unwrap();
        assert_eq!((c.precision, m.now), (F32, F32));
        let mut m = log(true);
        m.choose_precision(PrecisionRequest::F32).unwrap();
        assert_eq!(m.sets, [F32]);
    }

    #[test]
    fn a_remembered_agreement_check_is_not_run_again() {
        use Precision::{Bf16, F32};
        let dir = std::env::temp_dir().join(format!("imgseq-remembered-{}", std::process::id()));
        let cache = CheckCache::at(dir.join("checks.tsv"));
        let log = |passes| Log {
            now: F32,
            sets: vec![],
            passes,
        };
        // First run: the check runs (f32, bf16) and is written down.
        let mut m = log(true);
        let c = m
            .choose_precision_remembered(PrecisionRequest::Auto, Some((&cache, "model-a")))
            .unwrap();
        assert_eq!(
            (c.precision, m.sets.as_slice()),
            (Bf16, &[F32, F32, Bf16, Bf16][..])
        );
        // Second run: no check, the weights packed once, the reason says so.
        let mut m = log(true);
        let c = m
            .choose_precision_remembered(PrecisionRequest::Auto, Some((&cache, "model-a")))
            .unwrap();
        assert_eq!((c.precision, m.sets.as_slice()), (Bf16, &[Bf16][..]));
        assert!(
            c.reason.contains("checked on an earlier run"),
            "{}",
            c.reason
        );
        // A failed check is remembered as failed: f32 without running it.
        let mut m = log(false);
        m.choose_precision_remembered(PrecisionRequest::Auto, Some((&cache, "model-b")))
            .unwrap();
        let mut m = log(true);
        let c = m
            .choose_precision_remembered(PrecisionRequest::Auto, Some((&cache, "model-b")))
            .unwrap();
        assert_eq!((c.precision, m.sets.as_slice()), (F32, &[F32][..]));
        // An explicit precision neither reads nor writes it.
        let mut m = log(true);
        m.choose_precision_remembered(PrecisionRequest::F32, Some((&cache, "model-c")))
            .unwrap();
        assert_eq!(cache.get("model-c"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
