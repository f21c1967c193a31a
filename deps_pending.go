package main

// Dependencies taken on ahead of the code that uses them.
import (
	_ "golang.org/x/image/font/basicfont"
)
