import sys

print("building the wheel", sys.argv)
