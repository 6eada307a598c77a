# Curves for `ctrainer plot` and the model card: cairo.
