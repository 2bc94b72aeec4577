; A small int8 CNN, the bundled example of the README's main job:
;   conv 3x3 (1 -> 8 channels, pad 1) + bias, requantize to i8, relu,
;   2x2 max-pool, dense 512 -> 10 + bias (i32 logits).
(input image i8 (shape 1 1 16 16))
(weight conv_w i8 (shape 8 1 3 3) "small_cnn.npz")
(weight conv_b i32 (shape 8) "small_cnn.npz")
(weight dense_w i8 (shape 10 512) "small_cnn.npz")
(weight dense_b i32 (shape 10) "small_cnn.npz")

; conv: ((1,8,16,16),()) i32, written as the original Glenside writes a conv2d
(let conv
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor conv_w) 1)
    (access
     (access-squeeze
      (access-windows
       (access
        (access-pad (access-pad (access-tensor image) zero-padding 2 1 1) zero-padding 3 1 1)
        1)
       (shape 1 3 3)
       (shape 1 1 1))
      1)
     3)))
  (list 1 0 2 3)))

; + bias, broadcast along N, H and W
(let conv_biased
 (compute elementwise-add
  (access-pair
   conv
   (access-broadcast
    (access-insert-axis (access-insert-axis (access-insert-axis (access-tensor conv_b) 0) 2) 3)
    (access-shape (shape 1 8 16 16) (shape))))))

; i32 -> i8: (x + 8) >> 4, saturated; then relu
(let activated (compute relu (compute (requantize 1 0 4 0) conv_biased)))

; 2x2 max-pool, stride 2: ((1,8,8,8),()) i8
(let pooled
 (compute reduce-max (access-windows (access activated 2) (shape 2 2) (shape 2 2))))

; dense: flatten to ((1),(512)) and multiply by dense_w [10,512]
(let logits
 (compute dot-product
  (access-cartesian-product
   (access-reshape pooled (access-shape (shape 1) (shape 512)))
   (access (access-tensor dense_w) 1))))

(compute elementwise-add
 (access-pair
  logits
  (access-broadcast (access-insert-axis (access-tensor dense_b) 0)
                    (access-shape (shape 1 10) (shape)))))
