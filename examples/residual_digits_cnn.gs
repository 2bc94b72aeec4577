; A residual CNN for scikit-learn's digits, made and trained by examples/make_residual_digits_cnn.py.
(input image f32 (shape 1 1 8 8))
(weight c1_b f32 (shape 16) "residual_digits_cnn.npz")
(weight c1_w f32 (shape 16 1 3 3) "residual_digits_cnn.npz")
(weight c2_b f32 (shape 16) "residual_digits_cnn.npz")
(weight c2_w f32 (shape 16 16 3 3) "residual_digits_cnn.npz")
(weight c3_b f32 (shape 16) "residual_digits_cnn.npz")
(weight c3_w f32 (shape 16 16 3 3) "residual_digits_cnn.npz")
(weight c4_b f32 (shape 32) "residual_digits_cnn.npz")
(weight c4_w f32 (shape 32 16 3 3) "residual_digits_cnn.npz")
(weight fc_b f32 (shape 10) "residual_digits_cnn.npz")
(weight fc_w f32 (shape 10 128) "residual_digits_cnn.npz")

(let c1
 (compute relu
  (compute elementwise-add
   (access-pair
    (access-transpose
     (compute dot-product
      (access-cartesian-product
       (access (access-tensor c1_w) 1)
       (access
        (access-squeeze
         (access-windows
          (access
           (access-pad
            (access-pad (access-tensor image) zero-padding 2 1 1)
            zero-padding 3 1 1)
           1)
          (shape 1 3 3)
          (shape 1 1 1))
         1)
        3)))
     (list 1 0 2 3))
    (access-broadcast
     (access-reshape (access-tensor c1_b) (access-shape (shape 1 16 1 1) (shape)))
     (access-shape (shape 1 16 8 8) (shape)))))))
(let c2
 (compute relu
  (compute elementwise-add
   (access-pair
    (access-transpose
     (compute dot-product
      (access-cartesian-product
       (access (access-tensor c2_w) 1)
       (access
        (access-squeeze
         (access-windows
          (access (access-pad (access-pad c1 zero-padding 2 1 1) zero-padding 3 1 1) 1)
          (shape 16 3 3)
          (shape 1 1 1))
         1)
        3)))
     (list 1 0 2 3))
    (access-broadcast
     (access-reshape (access-tensor c2_b) (access-shape (shape 1 16 1 1) (shape)))
     (access-shape (shape 1 16 8 8) (shape)))))))
(let c3
 (compute reduce-max
  (access-windows
   (access
    (compute relu
     (compute elementwise-add
      (access-pair
       (compute elementwise-add
        (access-pair
         (access-transpose
          (compute dot-product
           (access-cartesian-product
            (access (access-tensor c3_w) 1)
            (access
             (access-squeeze
              (access-windows
               (access
                (access-pad (access-pad c2 zero-padding 2 1 1) zero-padding 3 1 1)
                1)
               (shape 16 3 3)
               (shape 1 1 1))
              1)
             3)))
          (list 1 0 2 3))
         (access-broadcast
          (access-reshape (access-tensor c3_b) (access-shape (shape 1 16 1 1) (shape)))
          (access-shape (shape 1 16 8 8) (shape)))))
       c1)))
    2)
   (shape 2 2)
   (shape 2 2))))
(let c4
 (compute reduce-max
  (access-windows
   (access
    (compute relu
     (compute elementwise-add
      (access-pair
       (access-transpose
        (compute dot-product
         (access-cartesian-product
          (access (access-tensor c4_w) 1)
          (access
           (access-squeeze
            (access-windows
             (access (access-pad (access-pad c3 zero-padding 2 1 1) zero-padding 3 1 1) 1)
             (shape 16 3 3)
             (shape 1 1 1))
            1)
           3)))
        (list 1 0 2 3))
       (access-broadcast
        (access-reshape (access-tensor c4_b) (access-shape (shape 1 32 1 1) (shape)))
        (access-shape (shape 1 32 4 4) (shape))))))
    2)
   (shape 2 2)
   (shape 2 2))))
(let flat (access-reshape c4 (access-shape (shape 1 128) (shape))))
(let fc
 (compute dot-product
  (access-cartesian-product (access flat 1) (access (access-tensor fc_w) 1))))
(let logits
 (compute elementwise-add
  (access-pair
   fc
   (access-broadcast
    (access-reshape (access-tensor fc_b) (access-shape (shape 1 10) (shape)))
    (access-shape (shape 1 10) (shape))))))

logits
