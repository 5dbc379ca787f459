# Norm-kernel bandwidth from analyses/kernel_table's data file -> a PNG.
#   gnuplot -e "data='docs/data/kernels_cpu.dat'; out='docs/images/kernels_cpu.png'" analyses/plot_kernels.gp
# Columns: dtype rows hidden variant median_ms p10_ms p90_ms gb_per_s
if (!exists("data")) data = "docs/data/kernels_cpu.dat"
if (!exists("out")) out = "docs/images/kernels_cpu.png"
set terminal pngcairo size 1400,560 font "DejaVu Sans,11" noenhanced
set output out
set multiplot layout 1,2 title "Effective bandwidth (bytes read + written / median) at 8192 rows, same run"
set logscale x 2
set xlabel "hidden size"
set ylabel "GB/s"
set grid lc rgb "#dddddd"
set key bottom right
sel(d, v) = (strcol(1) eq d && $2 == 8192 && strcol(4) eq v) ? $8 : 1/0
do for [d in "float32 bfloat16"] {
  set title d
  plot data using 3:(sel(d, "copy")) with linespoints lw 2 dt 2 lc rgb "#7f7f7f" title "copy", \
       data using 3:(sel(d, "foldnorm::rms_norm")) with linespoints lw 3 lc rgb "#2ca02c" title "foldnorm::rms_norm", \
       data using 3:(sel(d, "foldnorm::layer_norm")) with linespoints lw 2 lc rgb "#1f77b4" title "foldnorm::layer_norm", \
       data using 3:(sel(d, "aten::layer_norm")) with linespoints lw 2 lc rgb "#d62728" title "aten::layer_norm", \
       data using 3:(sel(d, "aten::rms_norm")) with linespoints lw 2 lc rgb "#ff7f0e" title "aten::rms_norm"
}
unset multiplot
