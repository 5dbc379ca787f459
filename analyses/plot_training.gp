# Loss curves of analyses/training_equivalence (docs/data/training*.csv) -> docs/images/training.png.
# Run from the repository root: gnuplot analyses/plot_training.gp
# CSV columns: dropout,seed,step,layernorm,rmsnorm,cbwc_rmsnorm,abs_ln_minus_cbwc
# (training_val.csv: seed 0 rows are the mean over the dropout seeds).
set datafile separator ","
set terminal pngcairo size 1400,1000 font "DejaVu Sans,11" noenhanced
set output "docs/images/training.png"
set key top right
set grid lc rgb "#dddddd"
set multiplot layout 2,2 title "Tiny character GPT on fortunes/computers: LayerNorm vs RMSNorm vs CBWC+RMSNorm (same init, same batches)"

nodrop(col) = ($1 == 0 ? column(col) : 1/0)
drop_mean(col) = ($1 > 0 && $2 == 0 ? column(col) : 1/0)

set title "Without dropout: train loss per step"
set xlabel "step"
set ylabel "cross entropy (nats/char)"
plot "docs/data/training.csv" skip 1 using 3:(nodrop(4)) with lines lw 4 lc rgb "#1f77b4" title "LayerNorm", \
     "" skip 1 using 3:(nodrop(5)) with lines lw 1.5 lc rgb "#d62728" title "RMSNorm", \
     "" skip 1 using 3:(nodrop(6)) with lines lw 1.5 dt 2 lc rgb "#ff7f0e" title "CBWC+RMSNorm (on top of LN)"

set title "|LayerNorm - CBWC+RMSNorm| train loss per step"
set logscale y
set format y "10^{%T}"
set format y "%.0e"
set ylabel "absolute loss difference"
plot "docs/data/training.csv" skip 1 using 3:(nodrop(7) > 0 ? nodrop(7) : 1/0) with lines lw 1.5 lc rgb "#2ca02c" title "no dropout", \
     "" skip 1 using 3:($1 > 0 && $2 == 1 && $7 > 0 ? $7 : 1/0) with lines lw 1 lc rgb "#9467bd" title "dropout, seed 1"
unset logscale y
set format y "%g"

set title "With dropout: validation loss (mean over seeds)"
set ylabel "cross entropy (nats/char)"
plot "docs/data/training_val.csv" skip 1 using 3:(drop_mean(4)) with linespoints pt 7 ps 0.6 lw 2 lc rgb "#1f77b4" title "LayerNorm", \
     "" skip 1 using 3:(drop_mean(5)) with linespoints pt 7 ps 0.6 lw 2 lc rgb "#d62728" title "RMSNorm", \
     "" skip 1 using 3:(drop_mean(6)) with linespoints pt 7 ps 0.6 lw 2 lc rgb "#ff7f0e" title "CBWC+RMSNorm"

set title "With dropout: validation loss minus LayerNorm's (thin: single seeds)"
set ylabel "loss difference to LayerNorm"
plot 0 with lines lc rgb "#1f77b4" lw 2 title "LayerNorm", \
     "docs/data/training_val.csv" skip 1 using 3:($1 > 0 && $2 == 0 ? $5 - $4 : 1/0) with linespoints pt 7 ps 0.6 lw 2 lc rgb "#d62728" title "RMSNorm", \
     "" skip 1 using 3:($1 > 0 && $2 == 0 ? $6 - $4 : 1/0) with linespoints pt 7 ps 0.6 lw 2 lc rgb "#ff7f0e" title "CBWC+RMSNorm", \
     "" skip 1 using 3:($1 > 0 && $2 > 0 ? $5 - $4 : 1/0) with lines lw 0.5 lc rgb "#f0a0a0" notitle, \
     "" skip 1 using 3:($1 > 0 && $2 > 0 ? $6 - $4 : 1/0) with lines lw 0.5 lc rgb "#ffc080" notitle
unset multiplot
