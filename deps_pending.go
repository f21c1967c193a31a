package main

// Dependencies taken on ahead of the code that uses them.
import (
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "golang.org/x/image/font/basicfont"
)
