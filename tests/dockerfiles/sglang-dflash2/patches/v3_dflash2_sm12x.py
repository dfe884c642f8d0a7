print("dflash2 sm12x patch applied")
