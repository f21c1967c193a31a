package main

// Dependencies taken on ahead of the code that uses them.
import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/oapi-codegen/runtime"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
)
