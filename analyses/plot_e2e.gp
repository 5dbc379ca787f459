# End-to-end speed-up vs sequence length from analyses/e2e_speed's data file -> a PNG.
#   gnuplot -e "data='docs/data/e2e_cpu.dat'; out='docs/images/e2e_cpu.png'" analyses/plot_e2e.gp
# Columns: model seq items orig_ms orig_p10 orig_p90 fold_ms fold_p10 fold_p90 speedup sp_p10 sp_p90 ci_low ci_high rounds
if (!exists("data")) data = "docs/data/e2e_cpu.dat"
if (!exists("out")) out = "docs/images/e2e_cpu.png"
set terminal pngcairo size 1400,560 font "DejaVu Sans,11" noenhanced
set output out
set multiplot layout 1,2 title "Original vs folded, interleaved in one run (latency: median, bars p10-p90; speed-up: median, bars its bootstrap 95% interval)"
set logscale x 2
set xrange [26:620]
set xlabel "sequence length"
set grid lc rgb "#dddddd"
set key top left
models = system("awk '!/^#/ {print $1}' " . data . " | uniq | tr '\\n' ' '")
set title "latency"
set ylabel "ms per forward"
set logscale y
plot for [m in models] data using 2:(strcol(1) eq m ? $4 : 1/0) with linespoints lw 2 title m . " original", \
     for [m in models] data using 2:(strcol(1) eq m ? $7 : 1/0) with linespoints lw 2 dt 2 title m . " folded"
unset logscale y
set title "speed-up (original / folded of back-to-back runs)"
set ylabel "speed-up"
plot for [m in models] data using 2:(strcol(1) eq m ? $10 : 1/0):13:14 with yerrorlines lw 2 title m, \
     1 with lines lc rgb "#000000" dt 3 notitle
unset multiplot
