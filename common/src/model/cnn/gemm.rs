//! Matrix products on strided views, by `matrixmultiply` (ndarray's GEMM): the one place that
//! calls into it, with every index checked before the unsafe call.

/// A matrix view: `rows`×`cols` at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> View<'a> {
    /// Row-major `rows`×`cols`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        View {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose, without copying.
    pub fn t(self) -> Self {
        View {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

/// c (row-major m×n) = a·b + beta·c.
pub fn gemm(a: View, b: View, beta: f32, c: &mut [f32]) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(b.rows == k && a.fits() && b.fits(), "gemm: shapes disagree");
    assert!(c.len() >= m * n, "gemm: output too small");
    // SAFETY: every index the product reads or writes is below its slice's length (checked
    // above for the strided views, m·n ≤ c.len() for the row-major output).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_with_transposed_views() {
        // a = [[1, 2], [3, 4]], b = [[5, 6], [7, 8]]
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        let mut c = [0.0; 4];
        gemm(View::rows(&a, 2, 2), View::rows(&b, 2, 2), 0.0, &mut c);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        gemm(View::rows(&a, 2, 2).t(), View::rows(&b, 2, 2), 0.0, &mut c);
        assert_eq!(c, [26.0, 30.0, 38.0, 44.0]);
        gemm(View::rows(&a, 2, 2), View::rows(&b, 2, 2).t(), 1.0, &mut c);
        assert_eq!(c, [26.0 + 17.0, 30.0 + 23.0, 38.0 + 39.0, 44.0 + 53.0]);
    }
}
