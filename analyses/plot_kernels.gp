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
set xrange [600:10000]
set yrange [0:*]
# One series per (dtype, variant) at 8192 rows, filtered by awk so the points join into lines.
src(d, v) = sprintf("< awk '$1 == \"%s\" && $2 == 8192 && $4 == \"%s\"' %s", d, v, data)
do for [d in "float32 bfloat16"] {
  set title d
  plot src(d, "copy") using 3:8 with linespoints lw 2 dt 2 lc rgb "#7f7f7f" title "copy", \
       src(d, "foldnorm::rms_norm") using 3:8 with linespoints lw 3 lc rgb "#2ca02c" title "foldnorm::rms_norm", \
       src(d, "foldnorm::layer_norm") using 3:8 with linespoints lw 2 lc rgb "#1f77b4" title "foldnorm::layer_norm", \
       src(d, "aten::layer_norm") using 3:8 with linespoints lw 2 lc rgb "#d62728" title "aten::layer_norm", \
       src(d, "aten::rms_norm") using 3:8 with linespoints lw 2 lc rgb "#ff7f0e" title "aten::rms_norm"
}
unset multiplot
