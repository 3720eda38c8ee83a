//! Which arithmetic inference runs in, and how `--precision f32|bf16|auto` becomes one.
//!
//! [`Precision::Bf16`] rounds the weights (once, at load) and the inputs (on each call) of a
//! model's bf16 conv and linear layers to bfloat16 and sums the products in f32
//! ([`crate::cpu::bf16`]): the ViT's patch projection and linear layers, the VQGAN's decoding
//! convs. Norms, softmax, attention products and the codebook search stay f32.

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

/// What was asked for: a precision, or `auto` — bf16 where the CPU has AVX512-BF16 and the
/// loaded model passes its agreement check against f32, else f32.
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

impl PrecisionRequest {
    /// Resolves the request on this CPU: `f32` and `bf16` as asked (bf16 without AVX512-BF16
    /// is the slow emulation); `auto` bf16 when the CPU has AVX512-BF16 and the model's
    /// agreement `check` passes, else f32.
    ///
    /// The choice depends on the CPU's instructions and the model only — never on a timing —
    /// so every run on one machine decodes the same tokens to the same pixels. (A speed probe
    /// decided it before: on one AMD EPYC it measured bf16 at 1.1× to 4.7× the f32 conv from
    /// run to run, flipping the choice.) Speed is not always bf16's (`vdpbf16ps` issues at a
    /// quarter of the FMA rate on some Xeons; on Zen 4 our f32 Winograd beats the bf16 direct
    /// convs on large models): where f32 is faster, `--precision f32` says so (README;
    /// `examples/bf16_bench.rs` measures it per layer).
    pub fn resolve<E>(
        self,
        check: impl FnOnce() -> Result<Agreement, E>,
    ) -> Result<PrecisionChoice, E> {
        self.resolve_with(bf16_native(), check)
    }

    /// [`Self::resolve`] for a CPU with (`native`) or without AVX512-BF16.
    pub fn resolve_with<E>(
        self,
        native: bool,
        check: impl FnOnce() -> Result<Agreement, E>,
    ) -> Result<PrecisionChoice, E> {
        let choice = |precision, native, reason: String| PrecisionChoice {
            precision,
            native,
            reason,
        };
        Ok(match self {
            Self::F32 => choice(Precision::F32, false, "requested".into()),
            Self::Bf16 if native => choice(
                Precision::Bf16,
                true,
                "requested; AVX512-BF16 vdpbf16ps".into(),
            ),
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
            Self::Auto => {
                let a = check()?;
                if a.passed {
                    choice(
                        Precision::Bf16,
                        true,
                        format!(
                            "auto: AVX512-BF16 vdpbf16ps, agreement check passed: {}",
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
        for native in [false, true] {
            let c = PrecisionRequest::F32.resolve_with(native, never).unwrap();
            assert_eq!((c.precision, c.native), (Precision::F32, false));
            let c = PrecisionRequest::Bf16.resolve_with(native, never).unwrap();
            assert_eq!((c.precision, c.native), (Precision::Bf16, native));
        }
        let c = PrecisionRequest::Auto.resolve_with(false, never).unwrap();
        assert!(c.precision == Precision::F32 && c.reason.contains("no AVX512-BF16"));
        let c = PrecisionRequest::Auto
            .resolve_with(true, ag(false))
            .unwrap();
        assert_eq!(c.precision, Precision::F32);
        assert!(
            c.reason.contains("check failed: 3/64 differ"),
            "{}",
            c.reason
        );
        let c = PrecisionRequest::Auto.resolve_with(true, ag(true)).unwrap();
        assert_eq!((c.precision, c.native), (Precision::Bf16, true));
        assert!(
            c.reason.contains("check passed: 3/64 differ"),
            "{}",
            c.reason
        );
    }
}
