//! Zero padding of convolution inputs, shared by the kernels and the reference ops.

/// Zero padding of a 2-D convolution input, per side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padding {
    pub left: usize,
    pub right: usize,
    pub top: usize,
    pub bottom: usize,
}

impl Padding {
    /// The same padding on all four sides.
    pub const fn same(p: usize) -> Self {
        Self {
            left: p,
            right: p,
            top: p,
            bottom: p,
        }
    }
    /// taming-transformers' Downsample padding: `F.pad(x, (0, 1, 0, 1))`, i.e. one zero column on
    /// the right and one zero row at the bottom, none on the left/top.
    pub const TAMING_DOWN: Self = Self {
        left: 0,
        right: 1,
        top: 0,
        bottom: 1,
    };
    pub(crate) fn is_symmetric(&self) -> bool {
        self.left == self.right && self.top == self.bottom && self.left == self.top
    }
}
