#!/usr/bin/perl
# trainer/cudaemu/rewrite_launches.pl IN.cu OUT.cc — a .cu file for the CUDA emulator's C++ build:
# each launch `kernel<<<grid, block, shared, stream>>>(args)` becomes
# `CT_EMU_LAUNCH((kernel), grid, block, shared, stream)(args)` (kernel.h), and a #line keeps the
# compiler's messages and the debugger on IN's lines. Nothing else changes.
use strict;
use warnings;
my ($in, $out) = @ARGV;
open(my $fh, '<', $in) or die "rewrite_launches: $in: $!\n";
local $/;
my $src = <$fh>;
close($fh);
my $n = ($src =~ s/((?:\w|::)+(?:<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(/CT_EMU_LAUNCH(($1), $2)(/gs);
open(my $oh, '>', $out) or die "rewrite_launches: $out: $!\n";
print $oh "#line 1 \"$in\"\n", $src;
close($oh) or die "rewrite_launches: $out: $!\n";
