; The canonical Glenside matmul: a[32,64] times b[64,16].
(input a f32 (shape 32 64))
(input b f32 (shape 64 16))

(compute dot-product
 (access-cartesian-product
  (access (access-tensor a) 1)
  (access (access-transpose (access-tensor b) (list 1 0)) 1)))
