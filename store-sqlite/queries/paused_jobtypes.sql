SELECT jobtype FROM paused ORDER BY jobtype
